package httpapi

import (
	"context"
	"net/url"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/fleet"
)

func clientBody(c fleet.Client) api.WFMClient {
	out := api.WFMClient{Id: c.ID, Status: api.WFMClientStatus(c.Status), ManifestVersion: c.ManifestVersion,
		DeviceCount: ptr(c.DeviceCount), CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt}
	if !c.RetiredAt.IsZero() {
		out.RetiredAt = ptr(c.RetiredAt)
	}
	return out
}

// ListClients lists WFM clients.
func (s *Server) ListClients(ctx context.Context, req api.ListClientsRequestObject) (api.ListClientsResponseObject, error) {
	cs, next, err := s.fleet.Clients(ctx, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListClients200JSONResponse{Items: make([]api.WFMClient, 0, len(cs))}
	for _, c := range cs {
		out.Items = append(out.Items, clientBody(c))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// AcceptClient accepts a client.
func (s *Server) AcceptClient(ctx context.Context, req api.AcceptClientRequestObject) (api.AcceptClientResponseObject, error) {
	c, created, err := s.fleet.AcceptClient(ctx, req.Body.Id)
	if err != nil {
		return nil, err
	}
	if created {
		return api.AcceptClient201JSONResponse{Body: clientBody(c), Headers: api.AcceptClient201ResponseHeaders{Location: "/mgmt/v1/clients/" + url.PathEscape(c.ID)}}, nil
	}
	return api.AcceptClient200JSONResponse(clientBody(c)), nil
}

// GetClient returns one client.
func (s *Server) GetClient(ctx context.Context, req api.GetClientRequestObject) (api.GetClientResponseObject, error) {
	c, err := s.fleet.Client(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	return api.GetClient200JSONResponse(clientBody(c)), nil
}

// RetireClient retires a client.
func (s *Server) RetireClient(ctx context.Context, req api.RetireClientRequestObject) (api.RetireClientResponseObject, error) {
	c, err := s.fleet.RetireClient(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	return api.RetireClient200JSONResponse(clientBody(c)), nil
}

func deviceBody(d fleet.Device) api.Device {
	op := api.Labels(d.OperatorLabels)
	if op == nil {
		op = api.Labels{}
	}
	out := api.Device{ClientId: d.ClientID, Id: d.ID, Registered: d.Registered, Capabilities: d.Capabilities,
		Labels: nonNil(d.Labels), ReportedLabels: nonNil(d.ReportedLabels), OperatorLabels: op,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	if !d.LastSeenAt.IsZero() {
		out.LastSeenAt = &d.LastSeenAt
	}
	return out
}

func nonNil(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// ListDevices lists devices.
func (s *Server) ListDevices(ctx context.Context, req api.ListDevicesRequestObject) (api.ListDevicesResponseObject, error) {
	ds, next, err := s.fleet.Devices(ctx, deref(req.Params.ClientId), deref(req.Params.LabelSelector), deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListDevices200JSONResponse{Items: make([]api.Device, 0, len(ds))}
	for _, d := range ds {
		out.Items = append(out.Items, deviceBody(d))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetDevice returns one device.
func (s *Server) GetDevice(ctx context.Context, req api.GetDeviceRequestObject) (api.GetDeviceResponseObject, error) {
	d, err := s.fleet.Device(ctx, req.ClientId, req.DeviceId)
	if err != nil {
		return nil, err
	}
	return api.GetDevice200JSONResponse(deviceBody(d)), nil
}

// PutDeviceLabels sets a device's operator labels.
func (s *Server) PutDeviceLabels(ctx context.Context, req api.PutDeviceLabelsRequestObject) (api.PutDeviceLabelsResponseObject, error) {
	d, err := s.fleet.SetDeviceLabels(ctx, req.ClientId, req.DeviceId, req.Body.Labels)
	if err != nil {
		return nil, err
	}
	return api.PutDeviceLabels200JSONResponse(deviceBody(d)), nil
}

func deploymentBody(d fleet.Deployment) api.Deployment {
	out := api.Deployment{
		Id: uuid.MustParse(d.ID), ApplicationId: d.ApplicationID, Version: d.Version.String(), ClientId: d.ClientID,
		DeviceId: d.DeviceID, ProfileId: d.ProfileID, State: api.DeploymentState(d.State), StateReason: d.StateReason,
		StateChangedAt: d.StateChangedAt, Revision: d.Revision, Parameters: nonNil(d.Parameters),
		ManifestVersion: ptr(d.DesiredSince), CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt,
	}
	if d.InstalledRevision > 0 {
		out.InstalledRevision = ptr(d.InstalledRevision)
	}
	if d.NewestAdopted > 0 {
		out.AdoptedManifestVersion = ptr(d.NewestAdopted)
	}
	if p := d.Progress; p != nil {
		pr := api.Progress{ReportedAt: p.ReportedAt, Healthy: p.Healthy}
		if p.Phase != "" {
			pr.Phase = ptr(api.DrainPhase(p.Phase))
		}
		if p.InFlight != nil {
			pr.InFlight = ptr(int(*p.InFlight))
		}
		if p.Message != "" {
			pr.Message = ptr(p.Message)
		}
		out.Progress = &pr
	}
	return out
}

func deploymentPath(id string) string { return "/mgmt/v1/deployments/" + id }

// CreateDeployment deploys an application version to a device.
func (s *Server) CreateDeployment(ctx context.Context, req api.CreateDeploymentRequestObject) (api.CreateDeploymentResponseObject, error) {
	b := req.Body
	params := map[string]any{}
	if b.Parameters != nil {
		params = *b.Parameters
	}
	d, err := s.fleet.CreateDeployment(ctx, fleet.CreateRequest{ApplicationID: b.ApplicationId, Version: b.Version,
		ClientID: b.ClientId, DeviceID: b.DeviceId, ProfileID: deref(b.ProfileId), Parameters: params, Timeout: b.Timeout})
	if err != nil {
		return nil, err
	}
	return api.CreateDeployment201JSONResponse{Body: deploymentBody(d),
		Headers: api.CreateDeployment201ResponseHeaders{Location: deploymentPath(d.ID), ETag: deploymentETag(d.ID, d.Generation)}}, nil
}

// ListDeployments lists deployments.
func (s *Server) ListDeployments(ctx context.Context, req api.ListDeploymentsRequestObject) (api.ListDeploymentsResponseObject, error) {
	p := req.Params
	ds, next, err := s.fleet.Deployments(ctx, fleet.ListRequest{ApplicationID: deref(p.ApplicationId), Version: deref(p.Version),
		ClientID: deref(p.ClientId), DeviceID: deref(p.DeviceId), State: string(deref(p.State)), Selector: deref(p.LabelSelector)},
		deref(p.Limit), deref(p.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListDeployments200JSONResponse{Items: make([]api.Deployment, 0, len(ds))}
	for _, d := range ds {
		out.Items = append(out.Items, deploymentBody(d))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetDeployment returns one deployment.
func (s *Server) GetDeployment(ctx context.Context, req api.GetDeploymentRequestObject) (api.GetDeploymentResponseObject, error) {
	d, err := s.fleet.Deployment(ctx, req.DeploymentId)
	if err != nil {
		return nil, err
	}
	return api.GetDeployment200JSONResponse{Body: deploymentBody(d), Headers: api.GetDeployment200ResponseHeaders{ETag: deploymentETag(d.ID, d.Generation)}}, nil
}

// DeleteDeployment removes a deployment from its device.
func (s *Server) DeleteDeployment(ctx context.Context, req api.DeleteDeploymentRequestObject) (api.DeleteDeploymentResponseObject, error) {
	d, err := s.fleet.RemoveDeploymentWithin(ctx, req.DeploymentId, ifMatch(req.Params.IfMatch, req.DeploymentId), req.Params.Timeout)
	if err != nil {
		return nil, err
	}
	return api.DeleteDeployment202JSONResponse{Body: deploymentBody(d), Headers: api.DeleteDeployment202ResponseHeaders{Location: deploymentPath(d.ID)}}, nil
}

func revisionBody(r fleet.Revision, withYAML bool) api.Revision {
	out := api.Revision{Revision: r.N, ApplicationId: r.ApplicationID, Version: r.Version.String(), ProfileId: r.ProfileID,
		Parameters: nonNil(r.Parameters), Operation: api.OperationType(r.Operation), Outcome: api.RevisionOutcome(r.Outcome),
		Digest: r.Digest, ManifestVersion: ptr(r.ManifestVersion), CreatedAt: r.CreatedAt}
	if withYAML {
		out.Yaml = ptr(string(r.YAML))
	}
	if r.Forced {
		out.Forced, out.ForceReason = ptr(true), ptr(r.ForceReason)
	}
	return out
}

// ListRevisions lists a deployment's revisions.
func (s *Server) ListRevisions(ctx context.Context, req api.ListRevisionsRequestObject) (api.ListRevisionsResponseObject, error) {
	rs, next, err := s.fleet.Revisions(ctx, req.DeploymentId, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListRevisions200JSONResponse{Items: make([]api.Revision, 0, len(rs))}
	for _, r := range rs {
		out.Items = append(out.Items, revisionBody(r, false))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetRevision returns one revision with its YAML.
func (s *Server) GetRevision(ctx context.Context, req api.GetRevisionRequestObject) (api.GetRevisionResponseObject, error) {
	r, err := s.fleet.Revision(ctx, req.DeploymentId, req.Revision)
	if err != nil {
		return nil, err
	}
	return api.GetRevision200JSONResponse(revisionBody(r, true)), nil
}

// ListHistory lists a deployment's state transitions.
func (s *Server) ListHistory(ctx context.Context, req api.ListHistoryRequestObject) (api.ListHistoryResponseObject, error) {
	ts, next, err := s.fleet.History(ctx, req.DeploymentId, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListHistory200JSONResponse{Items: make([]api.Transition, 0, len(ts))}
	for _, t := range ts {
		tr := api.Transition{At: t.At, To: api.DeploymentState(t.To), Cause: api.TransitionCause(t.Cause), Reason: t.Reason}
		if t.From != "" {
			tr.From = ptr(api.DeploymentState(t.From))
		}
		if t.Revision > 0 {
			tr.Revision = ptr(t.Revision)
		}
		out.Items = append(out.Items, tr)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetDeploymentStatus returns the latest status report.
func (s *Server) GetDeploymentStatus(ctx context.Context, req api.GetDeploymentStatusRequestObject) (api.GetDeploymentStatusResponseObject, error) {
	r, err := s.fleet.LatestReport(ctx, req.DeploymentId)
	if err != nil {
		return nil, err
	}
	return api.GetDeploymentStatus200JSONResponse{ReceivedAt: r.ReceivedAt, AdoptedManifestVersion: r.Adopted,
		State: api.DeviceState(r.State), Stale: r.Stale, Report: r.JSON}, nil
}
