package fleet

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
)

// CreateDeployment places an application version on a device and publishes
// revision 1 through an install operation whose deadline is the requested
// timeout. The creation is validated and rendered here, then handed to the
// service's batcher, which stores it with the creations of other calls
// that arrived while the previous batch was being stored (one transaction,
// one manifest version per client); the call's own audit entry and actor
// travel with it. If ctx ends before the creation is taken into a batch,
// it is not made and ctx's error is returned; once taken, it is made and
// its result returned.
//
// Returns EINVALID (invalid-request) naming /timeout when the timeout is
// not a duration within its range ("0s" included); EINVALID
// (invalid-version) for a bad version; ENOTFOUND if the
// version, client or device does not exist; EINVALID (version-yanked) for a
// yanked version; EINVALID (unknown-profile, not-placeable) when no profile
// fits; EINVALID (invalid-parameter-values) for bad parameter values.
func (s *Service) CreateDeployment(ctx context.Context, req CreateRequest) (Deployment, error) {
	d, remembered, err := s.createDeployment(ctx, req)
	if remembered && staleVersion(err) {
		// The store refused what it found of a remembered version: read
		// the version again, once, so that the answer is the one a fresh
		// read gives (a yank's reason and field). A version deleted since
		// is answered not-found by the store itself.
		s.versions.drop(req.ApplicationID, req.Version)
		d, _, err = s.createDeployment(ctx, req)
	}
	return d, err
}

// staleVersion reports whether the store refused a creation for what it
// found of its version (which a remembered version may not show yet).
func staleVersion(err error) bool {
	return versionChanged(err) || lifecycle.ErrorType(err) == "version-yanked"
}

// createDeployment is CreateDeployment without the retry; remembered says
// whether the version came from s.versions.
func (s *Service) createDeployment(ctx context.Context, req CreateRequest) (Deployment, bool, error) {
	timeout, err := installTimeout(req)
	if err != nil {
		return Deployment{}, false, err
	}
	_, remembered := s.versions.get(req.ApplicationID, req.Version)
	v, desc, err := s.version(ctx, req.ApplicationID, req.Version)
	if err != nil {
		return Deployment{}, false, err
	}
	dev, err := s.store.Device(ctx, req.ClientID, req.DeviceID)
	if err != nil {
		return Deployment{}, false, err
	}
	nd, err := s.prepareCreate(ctx, req, v, desc, dev, timeout, s.now().UTC())
	if err != nil {
		return Deployment{}, false, err
	}
	nd.Call = context.WithoutCancel(ctx)
	r, err := s.creations.do(ctx, nd)
	s.cache.invalidate(req.ClientID)
	if err != nil {
		return Deployment{}, false, err
	}
	return r.Deployment, remembered, r.Err
}

// CreateDeployments creates many deployments at once (a rollout wave, an
// install over a fleet): each request is validated and rendered as
// CreateDeployment does (in parallel, outside any transaction), then all
// of them are stored in one transaction with one new manifest version per
// affected client. The results are in the order of reqs; an item that is
// refused (for CreateDeployment's reasons) gets its error there and the
// others are still made. ctx's audit entry, if any, is the one row of the
// whole call.
//
// Returns an error, and creates nothing, when the store fails.
func (s *Service) CreateDeployments(ctx context.Context, reqs []CreateRequest) ([]CreateResult, error) {
	results := make([]CreateResult, len(reqs))
	type key [2]string
	type version struct {
		v    catalog.Version
		desc *margo.ApplicationDescription
		err  error
	}
	versions := map[key]*version{}
	devKeys := make([][2]string, 0, len(reqs))
	for _, r := range reqs {
		k := key{r.ApplicationID, r.Version}
		if versions[k] == nil {
			versions[k] = &version{}
			versions[k].v, versions[k].desc, versions[k].err = s.version(ctx, r.ApplicationID, r.Version)
			if err := versions[k].err; err != nil && !refusal(err) {
				return nil, err // the store failed, not the request
			}
		}
		devKeys = append(devKeys, [2]string{r.ClientID, r.DeviceID})
	}
	devices, err := s.store.DevicesByID(ctx, devKeys)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	nds := make([]NewDeployment, len(reqs))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, r := range reqs {
		g.Go(func() error {
			timeout, err := installTimeout(r)
			ver := versions[key{r.ApplicationID, r.Version}]
			if err == nil {
				err = ver.err
			}
			dev, ok := devices[[2]string{r.ClientID, r.DeviceID}]
			if err == nil && !ok {
				err = &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found", Message: fmt.Sprintf("Client %s has no device %s.", r.ClientID, r.DeviceID)}
			}
			if err == nil {
				nds[i], err = s.prepareCreate(ctx, r, ver.v, ver.desc, dev, timeout, now)
			}
			if refusal(err) {
				results[i].Err, err = err, nil
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	accepted, at := make([]NewDeployment, 0, len(reqs)), make([]int, 0, len(reqs))
	for i := range reqs {
		if results[i].Err == nil {
			accepted, at = append(accepted, nds[i]), append(at, i)
		}
	}
	if len(accepted) == 0 {
		return results, nil
	}
	stored, err := s.store.CreateDeployments(ctx, accepted, now)
	for _, nd := range accepted {
		s.cache.invalidate(nd.ClientID)
	}
	if err != nil {
		return nil, err
	}
	for j, r := range stored {
		results[at[j]] = r
		if versionChanged(r.Err) {
			s.versions.drop(reqs[at[j]].ApplicationID, reqs[at[j]].Version)
		}
	}
	return results, nil
}

// installTimeout is the install operation's step timeout req asks for.
func installTimeout(req CreateRequest) (time.Duration, error) {
	var ds durations
	timeout := ds.read(lifecycle.DurationInstallTimeout, req.Timeout, "/timeout")
	if err := ds.err(); err != nil {
		return 0, err
	}
	if timeout == 0 {
		timeout = lifecycle.DefaultInstallTimeout
	}
	return timeout, nil
}

// version reads a catalog version that may be deployed (remembered in
// s.versions: the store re-checks it), and its parsed description.
// Returns ENOTFOUND, EINVALID (invalid-version, version-yanked).
func (s *Service) version(ctx context.Context, appID, version string) (catalog.Version, *margo.ApplicationDescription, error) {
	v, ok := s.versions.get(appID, version)
	if !ok {
		var err error
		if v, err = s.catalog.Get(ctx, appID, version); err != nil {
			return v, nil, err
		}
		s.versions.put(appID, version, v)
	}
	if v.Yanked {
		return v, nil, yanked(v)
	}
	desc, err := s.catalog.Description(v)
	return v, desc, err
}

// prepareCreate validates a creation against the version's description and the
// device, and renders its revision 1 and its bundle piece: everything but
// the store's part.
func (s *Service) prepareCreate(ctx context.Context, req CreateRequest, v catalog.Version, desc *margo.ApplicationDescription, dev Device,
	timeout time.Duration, now time.Time) (NewDeployment, error) {
	if !dev.Registered {
		return NewDeployment{}, lifecycle.DeviceUnregisteredError(req.ClientID, req.DeviceID)
	}
	caps, err := margo.ParseCapabilities(dev.Capabilities, dev.ID)
	if err != nil {
		return NewDeployment{}, fmt.Errorf("stored capabilities of %s/%s: %w", dev.ClientID, dev.ID, err)
	}
	profile, err := margo.ChooseProfile(desc, caps, req.ProfileID)
	if err != nil {
		return NewDeployment{}, err
	}
	if err := desc.CheckValues(req.Parameters, false); err != nil {
		return NewDeployment{}, err
	}
	values := lifecycle.MergeValues(desc.DefaultValues(), req.Parameters)
	// Every parameter whose schema refuses an empty value must now have one,
	// from its default or from the request.
	if err := desc.CheckValues(values, true); err != nil {
		return NewDeployment{}, err
	}
	id, opID := newUUID(), newUUID()
	if req.deploymentID != "" {
		id, opID = req.deploymentID, req.operationID
	}
	var components []string
	for _, c := range profile.Components {
		components = append(components, c.Name)
	}
	yaml, err := s.specs.Render(margo.DeploymentInput{
		DeploymentID: id, DeviceID: req.DeviceID, Description: desc, Profile: profile, Values: values,
		Extension: margo.Extension{Revision: 1, Operation: lifecycle.OperationInstall, Strategy: desc.Lifecycle.Upgrade.DefaultStrategy()},
	})
	if err != nil {
		return NewDeployment{}, err
	}
	piece, err := margo.NewBundlePiece(margo.BundleFileName(id), yaml)
	if err != nil {
		return NewDeployment{}, fmt.Errorf("deployment %s: bundle piece: %w", id, err)
	}
	return NewDeployment{
		ID: id, ClientID: req.ClientID, DeviceID: req.DeviceID, ApplicationID: req.ApplicationID, RolloutID: req.rolloutID,
		Version: v.Version, VersionDigest: v.Digest, ProfileID: profile.ID, Components: components, Parameters: values, YAML: yaml, Digest: margo.Digest(yaml), Piece: &piece,
		Install: Operation{ID: opID, DeploymentID: id, Type: lifecycle.OperationInstall, State: lifecycle.OperationQueued,
			FromVersion: v.Version, ToVersion: v.Version, Parameters: values, ProfileID: profile.ID, Strategy: lifecycle.StrategyRecreate,
			OnFailure: OnFailureHalt, StepTimeout: timeout, RequestedBy: ActorOf(ctx), Deadline: now.Add(timeout),
			Steps: []Step{{N: 1, Version: v.Version, State: lifecycle.StepPending}}},
	}, nil
}

// refusal reports whether err refuses one request (a domain error), as
// opposed to a failure of the server or the database.
func refusal(err error) bool {
	c := lifecycle.ErrorCode(err)
	return c != "" && c != lifecycle.EINTERNAL && c != lifecycle.EUNAVAILABLE
}
