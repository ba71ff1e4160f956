package fleet

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wfm-dev/wfm/internal/catalog"
	"github.com/wfm-dev/wfm/internal/identity"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/margo"
	"github.com/wfm-dev/wfm/internal/page"
)

// Store is what the fleet needs from storage. Each method is one transaction;
// callbacks run inside it, on rows locked FOR UPDATE, and decide.
type Store interface {
	// ClientVersions returns the status and manifest version of those of
	// clientIDs that exist, in one read (a manifest cache checks its
	// entries with it after missed change notifications).
	ClientVersions(ctx context.Context, clientIDs []string) (map[string]ClientVersion, error)
	// ClientManifest returns a client's current manifest; with create it
	// first creates the client, accepted, with manifest version 1 (no
	// deployments). Returns ENOTFOUND if the client does not exist and
	// create is false.
	ClientManifest(ctx context.Context, clientID string, create bool, now time.Time) (Manifest, error)
	// AcceptClient creates the client accepted, or accepts it again.
	AcceptClient(ctx context.Context, clientID string, now time.Time) (Client, bool, error)
	// RetireClient retires a client. Returns ENOTFOUND if there is none.
	RetireClient(ctx context.Context, clientID string, now time.Time) (Client, error)
	// Client returns one client. Returns ENOTFOUND if there is none.
	Client(ctx context.Context, clientID string) (Client, error)
	// Clients returns up to limit clients with ids after after.
	Clients(ctx context.Context, after string, limit int) ([]Client, error)

	// PutDevice registers or updates a device; created is true when the
	// device was not registered before.
	PutDevice(ctx context.Context, clientID, deviceID string, capabilities []byte, reportedLabels map[string]any, now time.Time) (created bool, err error)
	// UnregisterDevice marks the device unregistered, removes its
	// deployments (state removed, cause device-unregistered) and publishes
	// the client's manifest without them. Returns ENOTFOUND if the device is
	// not registered.
	UnregisterDevice(ctx context.Context, clientID, deviceID string, now time.Time) error
	// Device returns one device. Returns ENOTFOUND if there is none.
	Device(ctx context.Context, clientID, deviceID string) (Device, error)
	// DevicesByID returns the devices of keys ([client id, device id]) that
	// exist, in one read.
	DevicesByID(ctx context.Context, keys [][2]string) (map[[2]string]Device, error)
	// Devices returns a page of devices matching f.
	Devices(ctx context.Context, f DeviceFilter, after string, limit int) ([]Device, error)
	// SetOperatorLabels replaces a device's operator labels.
	SetOperatorLabels(ctx context.Context, clientID, deviceID string, labels map[string]string, now time.Time) (Device, error)

	// CreateDeployments stores new deployments, each with its first
	// revision and its install operation (Install, whose one step
	// publishes the revision), in ONE transaction: each item is decided on
	// its own (lifecycle.DecideCreate) and an item the domain refuses gets
	// its error in its result and changes nothing, while the others are
	// applied as one batch: one new manifest version per affected client.
	// Each install's deadline is now plus its StepTimeout (the time of the
	// decision; Install.Deadline is not read). The results are in the order of ds. An item's refusal is ENOTFOUND
	// if its device or its version no longer exists, EINVALID
	// (device-unregistered) if its device is unregistered, EINVALID
	// (version-yanked) if the version was yanked meanwhile,
	// EINVALID (client-retired) if the client is retired. Returns an error,
	// and stores nothing, when the database fails.
	CreateDeployments(ctx context.Context, ds []NewDeployment, now time.Time) ([]CreateResult, error)
	// RemoveDeployment marks a deployment removing, publishes its
	// client's manifest without it and starts op, the remove operation
	// (lifecycle.DecideRemove; the store fills in what it reads of the
	// deployment); an active operation is cancelled. check runs on the
	// locked row first and may refuse. Returns ENOTFOUND if there is no
	// such deployment.
	RemoveDeployment(ctx context.Context, id string, op Operation, check func(Deployment) error, now time.Time) (Deployment, error)
	// RecordReport stores a status report for a deployment of clientID and
	// applies decide's decision. first is true for the deployment's first
	// report. Returns ENOTFOUND if the deployment is not the client's.
	// decide may refuse the report; then nothing is written.
	RecordReport(ctx context.Context, clientID string, r *margo.StatusReport, decide func(Deployment) (lifecycle.Decision, error), now time.Time) (first bool, err error)
	// RecordReports is RecordReport for reports of distinct deployments,
	// written together (a statement for the reports that move no state, a
	// transaction for the others, each one commit): each report is decided
	// on its own, and one the domain refuses (decide's error, ENOTFOUND)
	// gets its error in its result and writes nothing. The results are in
	// the order of items. Returns an error, and stores nothing, when the
	// database fails before anything could be committed, or when two items
	// name one deployment; a failure after which a commit may have happened
	// is each concerned item's error (so that no report is stored twice).
	RecordReports(ctx context.Context, items []ReportItem, now time.Time) ([]ReportResult, error)

	// Deployment returns one deployment. Returns ENOTFOUND if there is none.
	Deployment(ctx context.Context, id string) (Deployment, error)
	// Deployments returns a page of deployments matching f, newest first.
	Deployments(ctx context.Context, f DeploymentFilter, after string, limit int) ([]Deployment, error)
	// Revisions returns a page of a deployment's revisions, newest first
	// (numbers below before; 0 = from the newest).
	Revisions(ctx context.Context, deploymentID string, before int, limit int) ([]Revision, error)
	// Revision returns one revision. Returns ENOTFOUND if there is none.
	Revision(ctx context.Context, deploymentID string, n int) (Revision, error)
	// History returns a page of transitions, oldest first, with ids after after.
	History(ctx context.Context, deploymentID string, after int64, limit int) ([]Transition, []int64, error)
	// LatestReport returns the newest stored report. Returns ENOTFOUND if
	// there is none.
	LatestReport(ctx context.Context, deploymentID string) (StoredReport, error)
	// DeploymentYAML returns the YAML of any revision of a deployment of
	// clientID by digest. Returns ENOTFOUND otherwise.
	DeploymentYAML(ctx context.Context, clientID, deploymentID, digest string) ([]byte, error)
	// Bundle returns a bundle of clientID by digest. Returns ENOTFOUND otherwise.
	Bundle(ctx context.Context, clientID, digest string) ([]byte, error)

	// DeploymentsByID returns the deployments with these ids, by id (the
	// ids of no deployment are left out), and the id of the active
	// operation of each that has one, by deployment id; set-based.
	DeploymentsByID(ctx context.Context, ids []string) (map[string]Deployment, map[string]string, error)

	// CreateOperation stores a queued operation and its steps after check
	// passed on the locked deployment, in one transaction; check also
	// gets the deployment's rollout membership as it is under that lock.
	// Returns ECONFLICT (operation-in-progress, naming it) if another is
	// active.
	CreateOperation(ctx context.Context, op Operation, check func(Deployment, RolloutHold) error, now time.Time) (Operation, error)
	// CreateOperations is CreateOperation for operations of distinct
	// deployments, in one transaction: the errors are per operation, by
	// index (those refused are not created, the others are); the error
	// returned is for the whole batch, of which nothing was created.
	CreateOperations(ctx context.Context, ops []Operation, check func(Deployment, RolloutHold) error, now time.Time) ([]error, error)
	// Operation returns one operation with its steps. Returns ENOTFOUND.
	Operation(ctx context.Context, id string) (Operation, error)
	// OperationsByID returns the operations with these ids, with their
	// steps, by id (the ids of no operation are left out), set-based.
	OperationsByID(ctx context.Context, ids []string) (map[string]Operation, error)
	// Operations returns a page of operations, newest first.
	Operations(ctx context.Context, f OperationFilter, after string, limit int) ([]Operation, error)
	// CancelOperation ends an active operation as cancelled. Returns
	// ENOTFOUND, or ECONFLICT if it already ended.
	CancelOperation(ctx context.Context, id, reason string, now time.Time) (Operation, error)
	// ActiveOperation returns the id of a deployment's queued or running
	// operation, "" when there is none.
	ActiveOperation(ctx context.Context, deploymentID string) (string, error)
	// ActiveOperations returns the ids of the queued and running
	// operations due for a visit at now, nearest deadline first: queued,
	// never visited, their deployment changed since their last visit, or
	// the Recheck instant their last visit recorded passed.
	ActiveOperations(ctx context.Context, limit int, now time.Time) ([]string, error)
	// AdvanceOperations visits the active operations ids (results by
	// index). Each is read, holding no lock, and decide is called with what
	// it sees (decide may read the catalog), up to o.Concurrency at once. A
	// decision to do nothing (Advance.Nothing) records the deployment
	// generation seen and its Recheck instant. The decisions that change
	// something are applied together, several per transaction: each
	// operation is claimed (skipped when another scheduler holds it: not
	// visited), read again and its decision applied unless what decide saw
	// changed meanwhile (the next pass decides again); it is then due at the
	// next pass.
	AdvanceOperations(ctx context.Context, ids []string, decide func(Visit) (Advance, error), now time.Time, o AdvanceOptions) []VisitResult

	// RolloutStore: rollouts, their members and their driver (rollout_store.go).
	RolloutStore
}

// NewDeployment is what CreateDeployment stores.
type NewDeployment struct {
	ID            string
	ClientID      string
	DeviceID      string
	ApplicationID string
	Version       lifecycle.Version
	// VersionDigest is the digest of the catalog version's description
	// the creation was rendered from; the store refuses the creation
	// (VersionChanged) if the stored version's is another ("" skips the
	// check).
	VersionDigest string
	ProfileID     string
	Components    []string // the profile's component names
	Parameters    map[string]any
	// YAML is the revision's rendered ApplicationDeployment document.
	YAML []byte
	// Digest is YAML's digest (margo.Digest(YAML)), computed with the
	// rendering, outside the store's transaction; "": the store computes
	// it.
	Digest string
	// Piece, when not nil, is YAML's bundle piece
	// (margo.NewBundlePiece(margo.BundleFileName(ID), YAML)), computed
	// with the rendering, outside the store's transaction; nil: the store
	// computes it.
	Piece *margo.BundlePiece
	// Install is the install operation the creation starts: one step,
	// revision 1, with its deadline.
	Install Operation
	// RolloutID is the install rollout whose member this creation is (""
	// for any other creation). The store refuses a creation on a device
	// that is a pending member of an active install rollout of the same
	// application (RolloutMemberError), unless it is that rollout's.
	RolloutID string
	// Call, when not nil, carries the values of the call that asked for
	// this deployment (its actor, WithActor, and its audit entry) when
	// several calls' creations are stored in one batch; its cancellation
	// is not used. nil: the values of the store call's context.
	Call context.Context
}

// CreateResult is the outcome of one item of CreateDeployments: the
// deployment as stored, or why the item was refused.
type CreateResult struct {
	Deployment Deployment
	Err        error
}

// ReportItem is one status report of Store.RecordReports: the report of a
// deployment of ClientID, and the decision its deployment's state calls for.
type ReportItem struct {
	ClientID string
	Report   *margo.StatusReport
	Decide   func(Deployment) (lifecycle.Decision, error)
}

// ReportResult is the outcome of one item of Store.RecordReports: whether
// it was the deployment's first report, or why it was refused.
type ReportResult struct {
	First bool
	Err   error
}

// DeviceFilter selects devices.
type DeviceFilter struct {
	ClientID string
	Selector Selector
}

// DeploymentFilter selects deployments.
type DeploymentFilter struct {
	ApplicationID string
	Version       string // canonical
	ClientID      string
	DeviceID      string
	State         lifecycle.State
	Selector      Selector // on the device's labels
}

// AdvanceOptions are how Store.AdvanceOperations visits.
type AdvanceOptions struct {
	// Concurrency bounds the visits read and decided at once.
	Concurrency int
	// Timeout bounds each visit's read and decision, and each
	// transaction (0: none).
	Timeout time.Duration
}

// VisitResult is what one visit of AdvanceOperations did: whether the
// operation was visited (read and decided on, not held by another
// scheduler), and its failure.
type VisitResult struct {
	Visited bool
	Err     error
}

// Policy decides which clients may call the device API.
type Policy struct {
	// AcceptAll accepts every client of the trust domain on first contact;
	// otherwise only clients accepted through the management API may call.
	AcceptAll bool
	// AllowOverrides lets admins override a rollback policy (force);
	// false disables break-glass overrides entirely.
	AllowOverrides bool
}

// Service is the fleet's use cases.
type Service struct {
	store   Store
	catalog *catalog.Service
	policy  Policy
	now     func() time.Time
	log     *slog.Logger
	cache   *manifestCache
	wakeups chan struct{}
	// rolloutWakeups nudges the rollout driver's loop (wake nudges both).
	rolloutWakeups chan struct{}
	// versions remembers the catalog versions of creations (versionCache).
	versions *versionCache
	// creations coalesces concurrent creations (group commit).
	creations *batcher[NewDeployment, CreateResult]
	// reports coalesces concurrent status reports (group commit).
	reports *batcher[ReportItem, ReportResult]
	// specs keeps rendered specs (margo.SpecCache): a wave of creations or
	// steps of one version with the same parameters encodes its spec once.
	specs *margo.SpecCache
	// seen notes the device API's contacts (nil: not recorded).
	seen *LastSeen
	// leaseOwner is this service's token on the rollouts its driver
	// leases (random: each process, each Service, is its own driver).
	leaseOwner string
	// candidatePage: the candidates a rollout's resolution reads at a time.
	candidatePage int
	// staleLogged: the cache's passing of its staleness bound was logged
	// (once per outage).
	staleLogged atomic.Bool
}

// specCacheSize bounds Service.specs (a few KiB each).
const specCacheSize = 1024

// NewService returns the fleet service.
func NewService(store Store, cat *catalog.Service, policy Policy, now func() time.Time, log *slog.Logger) *Service {
	reports := newBatcher("report", store.RecordReports, now, log)
	reports.key = func(it ReportItem) string { return it.Report.DeploymentID }
	return &Service{store: store, catalog: cat, policy: policy, now: now, log: log, cache: newManifestCache(DefaultManifestStaleBound), wakeups: make(chan struct{}, 1), rolloutWakeups: make(chan struct{}, 1),
		creations: newBatcher("creation", store.CreateDeployments, now, log), reports: reports, versions: newVersionCache(),
		specs: margo.NewSpecCache(specCacheSize), leaseOwner: newUUID(), candidatePage: candidatePage}
}

// Close stops taking creations and status reports (CreateDeployment and
// ReportStatus then fail) and waits until those already queued are stored
// and answered. Call it once the HTTP servers have finished their requests.
func (s *Service) Close() {
	s.creations.close()
	s.reports.close()
}

// Invalidate drops what the service remembers of a client (its manifest and
// status); "" drops everything. Called on change notifications from any
// server process, and after local changes.
func (s *Service) Invalidate(clientID string) {
	if clientID == "" {
		s.cache.clear()
		return
	}
	s.cache.invalidate(clientID)
}

// DefaultManifestStaleBound is how long a stale manifest cache is served
// when no other bound is set (SetManifestStaleBound).
const DefaultManifestStaleBound = 5 * time.Minute

// SetManifestStaleBound sets how long the manifest cache keeps answering
// device API requests after it was last known current (ManifestCacheLost);
// past it, each request reads the store. 0: not at all. Call it before the
// service serves.
func (s *Service) SetManifestStaleBound(d time.Duration) { s.cache.bound = d }

// ManifestCacheLost tells the service that change notifications stopped
// arriving: the manifest cache was last known current at since. Until
// ResyncManifestCache, it is served for the staleness bound after since.
func (s *Service) ManifestCacheLost(since time.Time) {
	s.cache.lost(since)
	s.staleLogged.Store(false)
}

// ResyncManifestCache makes the manifest cache current again once change
// notifications arrive again (call it after LISTEN is in place): it
// compares every entry's status and manifest version with the store's in
// one read and drops only the entries that changed, so the clients whose
// manifests did not change keep being answered from memory. It returns
// how many entries it checked and dropped.
//
// Returns the store's error (EUNAVAILABLE when the database is away); the
// cache then stays stale.
func (s *Service) ResyncManifestCache(ctx context.Context) (checked, dropped int, err error) {
	start := time.Now()
	staleSince, _ := s.cache.state()
	cached := s.cache.beginResync()
	ids := make([]string, 0, len(cached))
	for id := range cached {
		ids = append(ids, id)
	}
	stored := map[string]ClientVersion{}
	if len(ids) > 0 {
		if stored, err = s.store.ClientVersions(ctx, ids); err != nil {
			return 0, 0, err
		}
	}
	current := make(map[string]cachedVersion, len(stored))
	for id, v := range stored {
		current[id] = cachedVersion{status: v.Status, version: v.ManifestVersion}
	}
	dropped = s.cache.endResync(cached, current)
	if !staleSince.IsZero() {
		s.log.Info("manifest cache checked against the database after missed change notifications; only changed entries dropped",
			"checked", len(cached), "dropped", dropped, "stale_since", staleSince, "took", time.Since(start).Round(time.Millisecond))
	}
	return len(cached), dropped, nil
}

// ManifestCacheState says how current the manifest cache is.
type ManifestCacheState struct {
	// StaleSince is when the cache was last known current, before change
	// notifications stopped arriving; zero while they arrive.
	StaleSince time.Time
	// ServedUntil is when a stale cache stops answering from memory
	// (StaleSince plus the staleness bound); zero while current.
	ServedUntil time.Time
}

// ManifestCacheState returns how current the manifest cache is.
func (s *Service) ManifestCacheState() ManifestCacheState {
	since, bound := s.cache.state()
	if since.IsZero() {
		return ManifestCacheState{}
	}
	return ManifestCacheState{StaleSince: since, ServedUntil: since.Add(bound)}
}

// Readiness decides what the readiness check answers, given dbErr, the
// outcome of this process's check of its database: whether the process
// should keep receiving traffic, and if so whether it is degraded (the
// reason; "" when whole). A process whose device API is still answered
// from memory stays ready while the database is away, so a load balancer
// does not take from devices the answers it still has: until the manifest
// cache's staleness bound passes, or at once when the bound is 0.
//
// Returns dbErr when the process should not receive traffic.
func (s *Service) Readiness(dbErr error) (degraded string, err error) {
	since, bound := s.cache.state()
	until := since.Add(bound)
	switch {
	case dbErr == nil && since.IsZero():
		return "", nil
	case dbErr == nil:
		return "change notifications have not arrived since " + since.UTC().Format(time.RFC3339) +
			": device API requests are answered from memory until " + until.UTC().Format(time.RFC3339) + ", then from the database", nil
	case bound == 0:
		return "", dbErr
	case since.IsZero():
		return "the database is unreachable: device API requests are answered from memory", nil
	case s.now().Before(until):
		return "the database is unreachable: device API requests are answered from memory until " + until.UTC().Format(time.RFC3339) +
			" (-manifest-stale-bound after " + since.UTC().Format(time.RFC3339) + ")", nil
	}
	return "", dbErr
}

// RecordLastSeen makes the service note every device API contact of an
// accepted client in l (see LastSeen for what a contact marks). Call it
// before the service serves.
func (s *Service) RecordLastSeen(l *LastSeen) { s.seen = l }

// notAuthorized is the device API's refusal of a client (Margo's type).
func notAuthorized(msg string) error {
	return &lifecycle.Error{Code: lifecycle.EFORBIDDEN, Type: "not-authorized", Message: msg}
}

// ManifestCacheStats returns how many lookups of the manifest cache (one
// per device API request, see Manifest) found the client's manifest in
// memory, and how many read it from the store, since the service started.
func (s *Service) ManifestCacheStats() (hits, misses uint64) {
	return s.cache.hits.Load(), s.cache.misses.Load()
}

// Manifest returns the calling client's current manifest, from memory when
// it can: the device poll's 304 answer needs no database. The device API
// authorizes each of its requests with it, so each call of an accepted
// client is noted as a contact (RecordLastSeen).
//
// Returns EFORBIDDEN (type "not-authorized") if the client is retired or,
// under a listed-clients policy, not accepted.
func (s *Service) Manifest(ctx context.Context, clientID string) (Manifest, error) {
	now := s.now()
	m, ok, gen := s.cache.get(clientID, now)
	if !ok {
		s.logPastStaleBound(now)
		var err error
		m, err = s.store.ClientManifest(ctx, clientID, s.policy.AcceptAll, now.UTC())
		if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
			return Manifest{}, notAuthorized("Client " + clientID + " is not accepted by this WFM; an administrator must accept it first.")
		}
		if err != nil {
			return Manifest{}, err
		}
		s.cache.put(clientID, m, gen)
	}
	if m.Status != ClientAccepted {
		return Manifest{}, notAuthorized("Client " + clientID + " is retired: this WFM no longer serves it.")
	}
	s.seen.Seen(clientID) // every device API request is authorized here
	return m, nil
}

// logPastStaleBound logs, once per outage, that the manifest cache is past
// its staleness bound: device API requests need the database from now on.
func (s *Service) logPastStaleBound(now time.Time) {
	st := s.ManifestCacheState()
	if st.StaleSince.IsZero() || now.Before(st.ServedUntil) || s.staleLogged.Swap(true) {
		return
	}
	s.log.Warn("manifest cache past its staleness bound: device API requests read the database until change notifications arrive again",
		"stale_since", st.StaleSince, "bound", st.ServedUntil.Sub(st.StaleSince))
}

// Authorize checks that a client may call the device API.
//
// Returns EFORBIDDEN (type "not-authorized") otherwise.
func (s *Service) Authorize(ctx context.Context, clientID string) error {
	_, err := s.Manifest(ctx, clientID)
	return err
}

// PutCapabilities registers or updates a device of the client from its
// capabilities document. created is true for a new (or re-registered) device.
//
// Returns EMALFORMED, ETOOLARGE or EINVALID as margo.ParseCapabilities does;
// EFORBIDDEN as Authorize does.
func (s *Service) PutCapabilities(ctx context.Context, clientID, deviceID string, raw []byte) (bool, error) {
	caps, err := margo.ParseCapabilities(raw, deviceID)
	if err != nil {
		return false, err
	}
	if err := s.Authorize(ctx, clientID); err != nil { // creates the client on first contact, per policy
		return false, err
	}
	created, err := s.store.PutDevice(ctx, clientID, deviceID, caps.JSON, caps.Labels, s.now().UTC())
	if err == nil {
		s.seen.Seen(clientID) // again: a new device did not exist at the authorization's mark
	}
	return created, err
}

// Unregister unregisters a device: its deployments leave the manifest.
//
// Returns ENOTFOUND if the client has no such registered device.
func (s *Service) Unregister(ctx context.Context, clientID, deviceID string) error {
	err := s.store.UnregisterDevice(ctx, clientID, deviceID, s.now().UTC())
	s.cache.invalidate(clientID)
	return err
}

// DeploymentYAML returns a revision's YAML of one of the client's
// deployments by digest. Returns ENOTFOUND otherwise.
func (s *Service) DeploymentYAML(ctx context.Context, clientID, deploymentID, digest string) ([]byte, error) {
	return s.store.DeploymentYAML(ctx, clientID, deploymentID, digest)
}

// Bundle returns one of the client's bundles by digest. Returns ENOTFOUND otherwise.
func (s *Service) Bundle(ctx context.Context, clientID, digest string) ([]byte, error) {
	return s.store.Bundle(ctx, clientID, digest)
}

// ReportStatus validates and records a status report and moves the
// deployment's state as the lifecycle state machine decides. first is true
// for the deployment's first report. The report is parsed and validated in
// the caller's goroutine, then stored with the reports of other calls that
// arrive meanwhile (group commit: Store.RecordReports, one transaction);
// ReportStatus returns once that transaction committed (or refused this
// report). Reports of one deployment are stored in arrival order.
//
// Returns EMALFORMED, ETOOLARGE or EINVALID as margo.ParseStatusReport does;
// EINVALID (type "unknown-deployment") if the deployment is not the
// client's; EINVALID (type "component-mismatch") if the reported components
// are not the deployment's; EINVALID (type "device-id-mismatch") if the
// report names another device; EINVALID (type "invalid-status") if it
// claims a manifest version never published to the client; EUNAVAILABLE
// once the service is closed (Close). A refused report changes nothing.
func (s *Service) ReportStatus(ctx context.Context, clientID, deploymentID string, raw []byte) (bool, error) {
	r, err := margo.ParseStatusReport(raw, deploymentID)
	if err != nil {
		return false, err
	}
	// One spelling of the id for the batch's key and the store's lookups
	// (the database compares UUIDs in any case; a batch keyed by text
	// would not).
	r.DeploymentID = strings.ToLower(r.DeploymentID)
	decide := func(d Deployment) (lifecycle.Decision, error) {
		if r.DeviceID != "" && r.DeviceID != d.DeviceID {
			return lifecycle.Decision{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "device-id-mismatch",
				Message: fmt.Sprintf("Deployment %s runs on device %s, not %s.", d.ID, d.DeviceID, r.DeviceID),
				Fields:  []lifecycle.FieldError{{Pointer: "/deviceId", Detail: "not the deployment's device"}}}
		}
		if r.AdoptedManifestVersion > d.Published {
			return lifecycle.Decision{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-status",
				Message: fmt.Sprintf("adoptedManifestVersion %d was never published to this client (its newest is %d).", r.AdoptedManifestVersion, d.Published),
				Fields:  []lifecycle.FieldError{{Pointer: "/adoptedManifestVersion", Detail: "newer than any published manifest"}}}
		}
		var unknown []lifecycle.FieldError
		for i, c := range r.Components {
			if !slices.Contains(d.Components, c.Name) {
				unknown = append(unknown, lifecycle.FieldError{Pointer: fmt.Sprintf("/components/%d/name", i),
					Detail: fmt.Sprintf("not a component of this deployment (%s)", strings.Join(d.Components, ", "))})
			}
		}
		if len(unknown) > 0 {
			return lifecycle.Decision{}, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "component-mismatch",
				Message: "The report names components the deployment does not have.", Fields: unknown}
		}
		phase := ""
		if r.Extension != nil {
			phase = string(r.Extension.Phase)
		}
		return lifecycle.Decide(lifecycle.Observation{
			Current:       d.State,
			Op:            currentOp(d),
			DesiredSince:  d.DesiredSince,
			Removing:      d.Removing,
			NewestAdopted: d.NewestAdopted,
			Strategy:      d.Strategy,
			Report:        lifecycle.ReportView{State: string(r.State), Adopted: r.AdoptedManifestVersion, Phase: phase, Message: r.FailureMessage()},
		}), nil
	}
	res, err := s.reports.do(ctx, ReportItem{ClientID: clientID, Report: r, Decide: decide})
	if err == nil {
		err = res.Err
	}
	first := res.First
	if err == nil {
		s.wake() // an operation may advance
	}
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return false, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "unknown-deployment",
			Message: "This client has no deployment " + deploymentID + ".",
			Fields:  []lifecycle.FieldError{{Pointer: "/deploymentId", Detail: "no such deployment for this client"}}}
	}
	return first, err
}

// currentOp is the operation that produced the desired revision; a
// removal is marked by Removing.
func currentOp(d Deployment) lifecycle.OperationKind {
	if d.Removing {
		return lifecycle.OperationRemove
	}
	if d.Operation != "" {
		return d.Operation
	}
	return lifecycle.OperationInstall
}

// CreateRequest asks for a new deployment.
type CreateRequest struct {
	ApplicationID string
	Version       string
	ClientID      string
	DeviceID      string
	ProfileID     string
	Parameters    map[string]any
	// Timeout is how long the device may take to install revision 1, as
	// requested: a duration within lifecycle.DurationInstallTimeout's
	// range; nil for the default (lifecycle.DefaultInstallTimeout).
	Timeout *string

	// deploymentID and operationID, when set (a rollout's install member),
	// are the ids of the deployment and its install operation, chosen when
	// the member was reserved; rolloutID is that rollout.
	deploymentID, operationID, rolloutID string
}

func yanked(v catalog.Version) error {
	msg := fmt.Sprintf("Version %s of %s is yanked", v.Version, v.ApplicationID)
	if v.YankedReason != "" {
		msg += " (" + v.YankedReason + ")"
	}
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "version-yanked", Message: msg + "; it cannot be deployed.",
		Fields: []lifecycle.FieldError{{Pointer: "/version", Detail: "yanked"}}}
}

// RemoveDeployment deletes a deployment with the default removal timeout
// (lifecycle.DefaultRemoveTimeout); see RemoveDeploymentWithin.
func (s *Service) RemoveDeployment(ctx context.Context, id string, expect Precondition) (Deployment, error) {
	return s.RemoveDeploymentWithin(ctx, id, expect, nil)
}

// RemoveDeploymentWithin deletes a deployment: it leaves its client's
// manifest and becomes removing, and a remove operation whose deadline is
// the requested timeout (nil: lifecycle.DefaultRemoveTimeout) starts; an
// operation under way is cancelled. The deployment must meet expect,
// checked on its locked row.
//
// Returns EINVALID (invalid-request) naming query/timeout (the parameter of
// DELETE /mgmt/v1/deployments/{id}) when the timeout is not
// a duration within its range ("0s" included); ENOTFOUND if there is no
// such deployment, EPRECONDITION (precondition-failed) if it does not meet
// expect.
func (s *Service) RemoveDeploymentWithin(ctx context.Context, id string, expect Precondition, timeout *string) (Deployment, error) {
	var ds durations
	t := ds.read(lifecycle.DurationRemoveTimeout, timeout, "query/timeout")
	if err := ds.err(); err != nil {
		return Deployment{}, err
	}
	if t == 0 {
		t = lifecycle.DefaultRemoveTimeout
	}
	now := s.now().UTC()
	op := Operation{ID: newUUID(), Type: lifecycle.OperationRemove, State: lifecycle.OperationQueued, Strategy: lifecycle.StrategyRecreate,
		OnFailure: OnFailureHalt, StepTimeout: t, RequestedBy: ActorOf(ctx), Deadline: now.Add(t)}
	d, err := s.store.RemoveDeployment(ctx, id, op, func(d Deployment) error {
		return expect.check(d)
	}, now)
	if err == nil {
		s.cache.invalidate(d.ClientID)
		s.wake()
	}
	return d, err
}

// Precondition is what a change expects of the deployment it changes. The
// store checks it on the deployment's locked row, so of two changes that
// expect the same generation only the first passes. The zero value expects
// nothing.
type Precondition struct {
	set         bool
	generations []int64
}

// ExpectGeneration is the precondition that the deployment's generation
// (Deployment.Generation) is one of gs. With none it is never met: the
// caller knows no generation that would do, yet the change must still be
// refused only once the deployment is found and the change allowed.
func ExpectGeneration(gs ...int64) Precondition {
	return Precondition{set: true, generations: gs}
}

// check returns EPRECONDITION (precondition-failed) when d does not meet p.
func (p Precondition) check(d Deployment) error {
	if !p.set || slices.Contains(p.generations, d.Generation) {
		return nil
	}
	return &lifecycle.Error{Code: lifecycle.EPRECONDITION, Type: "precondition-failed",
		Message: "The deployment changed since it was read (If-Match does not match its ETag); read it again."}
}

// Reads, each returning ENOTFOUND when the thing does not exist.

// Deployment returns one deployment, with the progress its agent reported.
func (s *Service) Deployment(ctx context.Context, id string) (Deployment, error) {
	d, err := s.store.Deployment(ctx, id)
	if err != nil {
		return d, err
	}
	r, err := s.store.LatestReport(ctx, id)
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	var doc struct {
		Ext *struct {
			Phase    string `json:"phase"`
			InFlight *int64 `json:"inFlight"`
			Healthy  *bool  `json:"healthy"`
			Message  string `json:"message"`
		} `json:"x-wfm-extensions"`
	}
	if json.Unmarshal(r.JSON, &doc) == nil && doc.Ext != nil {
		d.Progress = &Progress{Phase: doc.Ext.Phase, InFlight: doc.Ext.InFlight, Healthy: doc.Ext.Healthy, Message: doc.Ext.Message, ReportedAt: r.ReceivedAt}
	}
	return d, nil
}

// Revision returns one revision of a deployment.
func (s *Service) Revision(ctx context.Context, id string, n int) (Revision, error) {
	return s.store.Revision(ctx, id, n)
}

// LatestReport returns the newest status report of a deployment.
func (s *Service) LatestReport(ctx context.Context, id string) (StoredReport, error) {
	if _, err := s.store.Deployment(ctx, id); err != nil {
		return StoredReport{}, err
	}
	r, err := s.store.LatestReport(ctx, id)
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return StoredReport{}, &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found", Message: "The device has not reported status for deployment " + id + " yet."}
	}
	return r, err
}

// Client returns one client.
func (s *Service) Client(ctx context.Context, id string) (Client, error) {
	return s.store.Client(ctx, id)
}

// Device returns one device.
func (s *Service) Device(ctx context.Context, clientID, deviceID string) (Device, error) {
	return s.store.Device(ctx, clientID, deviceID)
}

// AcceptClient accepts a client (again). created is true for a new client.
//
// Returns EINVALID (type "invalid-request", error at /id) if id is not a
// client id a certificate could name (identity.CheckClientID, the check the
// certificate path uses: for example "." or "..", which the contract's
// character class lets through); nothing is created then.
func (s *Service) AcceptClient(ctx context.Context, id string) (Client, bool, error) {
	if err := identity.CheckClientID(id); err != nil {
		detail := err.Error()
		var e *lifecycle.Error
		if errors.As(err, &e) {
			detail = e.Message
		}
		return Client{}, false, &lifecycle.Error{Code: lifecycle.EINVALID, Type: lifecycle.ProblemInvalidRequest,
			Message: "The client id cannot be named by a client certificate.", Fields: []lifecycle.FieldError{{Pointer: "/id", Detail: detail}}}
	}
	c, created, err := s.store.AcceptClient(ctx, id, s.now().UTC())
	s.cache.invalidate(id)
	return c, created, err
}

// RetireClient retires a client; its device API calls get 403 from now on.
func (s *Service) RetireClient(ctx context.Context, id string) (Client, error) {
	c, err := s.store.RetireClient(ctx, id, s.now().UTC())
	s.cache.invalidate(id)
	return c, err
}

// SetDeviceLabels replaces a device's operator labels.
//
// Returns EINVALID for bad labels, ENOTFOUND if there is no such device.
func (s *Service) SetDeviceLabels(ctx context.Context, clientID, deviceID string, labels map[string]string) (Device, error) {
	if err := ValidateLabels(labels); err != nil {
		return Device{}, err
	}
	return s.store.SetOperatorLabels(ctx, clientID, deviceID, labels, s.now().UTC())
}

// Clients returns a page of clients and the next cursor.
func (s *Service) Clients(ctx context.Context, limit int, cursor string) ([]Client, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	cs, err := s.store.Clients(ctx, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	cs, next := page.Trim(cs, limit, func(x Client) string { return x.ID })
	return cs, next, nil
}

// Devices returns a page of devices and the next cursor.
//
// Returns EINVALID for a bad selector, limit or cursor.
func (s *Service) Devices(ctx context.Context, clientID, selector string, limit int, cursor string) ([]Device, string, error) {
	sel, err := ParseSelector(selector)
	if err != nil {
		return nil, "", err
	}
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	ds, err := s.store.Devices(ctx, DeviceFilter{ClientID: clientID, Selector: sel}, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	ds, next := page.Trim(ds, limit, func(x Device) string { return x.ClientID + "\x00" + x.ID })
	return ds, next, nil
}

// ListRequest filters deployments.
type ListRequest struct {
	ApplicationID, Version, ClientID, DeviceID, State, Selector string
}

// Deployments returns a page of deployments, newest first, and the next cursor.
//
// Returns EINVALID for a bad filter, limit or cursor.
func (s *Service) Deployments(ctx context.Context, req ListRequest, limit int, cursor string) ([]Deployment, string, error) {
	sel, err := ParseSelector(req.Selector)
	if err != nil {
		return nil, "", err
	}
	f := DeploymentFilter{ApplicationID: req.ApplicationID, ClientID: req.ClientID, DeviceID: req.DeviceID, State: lifecycle.State(req.State), Selector: sel}
	if req.Version != "" {
		v, err := lifecycle.ParseVersion(req.Version)
		if err != nil {
			return nil, "", err
		}
		f.Version = v.String()
	}
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	ds, err := s.store.Deployments(ctx, f, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ds) > limit {
		ds = ds[:limit]
		last := ds[limit-1]
		next = page.Encode(last.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + last.ID)
	}
	return ds, next, nil
}

// Revisions returns a page of a deployment's revisions, newest first.
func (s *Service) Revisions(ctx context.Context, id string, limit int, cursor string) ([]Revision, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	before := 0
	if after != "" {
		if before, err = strconv.Atoi(after); err != nil {
			return nil, "", page.BadCursor()
		}
	}
	if _, err := s.store.Deployment(ctx, id); err != nil {
		return nil, "", err
	}
	rs, err := s.store.Revisions(ctx, id, before, limit+1)
	if err != nil {
		return nil, "", err
	}
	rs, next := page.Trim(rs, limit, func(x Revision) string { return strconv.Itoa(x.N) })
	return rs, next, nil
}

// History returns a page of a deployment's transitions, oldest first.
func (s *Service) History(ctx context.Context, id string, limit int, cursor string) ([]Transition, string, error) {
	limit, after, err := page.Args(limit, cursor)
	if err != nil {
		return nil, "", err
	}
	var afterID int64
	if after != "" {
		if afterID, err = strconv.ParseInt(after, 10, 64); err != nil {
			return nil, "", page.BadCursor()
		}
	}
	if _, err := s.store.Deployment(ctx, id); err != nil {
		return nil, "", err
	}
	ts, ids, err := s.store.History(ctx, id, afterID, limit+1)
	if err != nil {
		return nil, "", err
	}
	ts, next := page.Trim(ts, limit, func(Transition) string { return strconv.FormatInt(ids[limit-1], 10) })
	return ts, next, nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func sortFields(fs []lifecycle.FieldError) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Pointer < fs[j].Pointer })
}
