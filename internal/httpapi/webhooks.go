package httpapi

import (
	"context"
	"strconv"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/lifecycle"
	"github.com/wfm-dev/wfm/internal/webhook"
)

// webhookETag is the strong validator of a subscription's representation,
// "w-<12 hex digits of its ID>-<generation>".
func webhookETag(id string, generation int64) string {
	return `"w-` + idPrefix(id) + "-" + strconv.FormatInt(generation, 10) + `"`
}

// webhookIfMatch translates If-Match on subscription id into what the
// change expects of it (see preconditionOf).
func webhookIfMatch(header *string, id string) webhook.Expect {
	if gs, set := generationsOf(header, id, webhookETag); set {
		return webhook.ExpectGeneration(gs...)
	}
	return webhook.Expect{}
}

func (s *Server) webhookService() (*webhook.Service, error) {
	if s.webhooks == nil {
		return nil, lifecycle.Errorf(lifecycle.EUNAVAILABLE, "webhooks are not configured on this server")
	}
	return s.webhooks, nil
}

func webhookBody(w webhook.Webhook) api.Webhook {
	out := api.Webhook{Id: uuid.MustParse(w.ID), Url: w.URL, Description: w.Description, Types: w.Types,
		Enabled: w.Enabled, ConsecutiveFailures: w.ConsecutiveFailures, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		Filters: filtersBody(w.Filters)}
	if out.Types == nil {
		out.Types = []string{}
	}
	if w.DisabledReason != "" {
		out.DisabledReason = ptr(w.DisabledReason)
	}
	if !w.PreviousUntil.IsZero() {
		out.PreviousSecretValidUntil = ptr(w.PreviousUntil)
	}
	return out
}

func filtersBody(f webhook.Filters) api.WebhookFilters {
	var out api.WebhookFilters
	if f.Application != "" {
		out.Application = ptr(f.Application)
	}
	if f.Client != "" {
		out.Client = ptr(f.Client)
	}
	if f.Device != "" {
		out.Device = ptr(f.Device)
	}
	if f.Deployment != "" {
		out.Deployment = ptr(uuid.MustParse(f.Deployment))
	}
	if f.Rollout != "" {
		out.Rollout = ptr(uuid.MustParse(f.Rollout))
	}
	return out
}

func filtersOf(f *api.WebhookFilters) webhook.Filters {
	if f == nil {
		return webhook.Filters{}
	}
	out := webhook.Filters{Application: deref(f.Application), Client: deref(f.Client), Device: deref(f.Device)}
	if f.Deployment != nil {
		out.Deployment = f.Deployment.String()
	}
	if f.Rollout != nil {
		out.Rollout = f.Rollout.String()
	}
	return out
}

// CreateWebhook subscribes a URL to events.
func (s *Server) CreateWebhook(ctx context.Context, req api.CreateWebhookRequestObject) (api.CreateWebhookResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	b := req.Body
	enabled := true
	if b.Enabled != nil {
		enabled = *b.Enabled
	}
	w, secret, err := svc.Create(ctx, webhook.Webhook{URL: b.Url, Description: deref(b.Description), Types: deref(b.Types),
		Filters: filtersOf(b.Filters), Enabled: enabled})
	if err != nil {
		return nil, err
	}
	return api.CreateWebhook201JSONResponse{Body: api.NewWebhook{Webhook: webhookBody(w), Secret: secret},
		Headers: api.CreateWebhook201ResponseHeaders{Location: "/mgmt/v1/webhooks/" + w.ID, ETag: webhookETag(w.ID, w.Generation)}}, nil
}

// ListWebhooks lists subscriptions.
func (s *Server) ListWebhooks(ctx context.Context, req api.ListWebhooksRequestObject) (api.ListWebhooksResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	ws, next, err := svc.List(ctx, deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListWebhooks200JSONResponse{Items: make([]api.Webhook, 0, len(ws))}
	for _, w := range ws {
		out.Items = append(out.Items, webhookBody(w))
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// GetWebhook returns one subscription.
func (s *Server) GetWebhook(ctx context.Context, req api.GetWebhookRequestObject) (api.GetWebhookResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	w, err := svc.Get(ctx, req.WebhookId.String())
	if err != nil {
		return nil, err
	}
	return api.GetWebhook200JSONResponse{Body: webhookBody(w), Headers: api.GetWebhook200ResponseHeaders{ETag: webhookETag(w.ID, w.Generation)}}, nil
}

// UpdateWebhook changes a subscription.
func (s *Server) UpdateWebhook(ctx context.Context, req api.UpdateWebhookRequestObject) (api.UpdateWebhookResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	b := req.Body
	u := webhook.Update{URL: b.Url, Description: b.Description, Types: b.Types, Enabled: b.Enabled}
	if b.Filters != nil {
		f := filtersOf(b.Filters)
		u.Filters = &f
	}
	id := req.WebhookId.String()
	w, err := svc.Update(ctx, id, u, webhookIfMatch(req.Params.IfMatch, id))
	if err != nil {
		return nil, err
	}
	return api.UpdateWebhook200JSONResponse{Body: webhookBody(w), Headers: api.UpdateWebhook200ResponseHeaders{ETag: webhookETag(w.ID, w.Generation)}}, nil
}

// DeleteWebhook deletes a subscription.
func (s *Server) DeleteWebhook(ctx context.Context, req api.DeleteWebhookRequestObject) (api.DeleteWebhookResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	id := req.WebhookId.String()
	if err := svc.Delete(ctx, id, webhookIfMatch(req.Params.IfMatch, id)); err != nil {
		return nil, err
	}
	return api.DeleteWebhook204Response{}, nil
}

// RotateWebhookSecret replaces a subscription's signing secret.
func (s *Server) RotateWebhookSecret(ctx context.Context, req api.RotateWebhookSecretRequestObject) (api.RotateWebhookSecretResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	w, secret, err := svc.RotateSecret(ctx, req.WebhookId.String())
	if err != nil {
		return nil, err
	}
	return api.RotateWebhookSecret200JSONResponse{Body: api.NewWebhook{Webhook: webhookBody(w), Secret: secret},
		Headers: api.RotateWebhookSecret200ResponseHeaders{ETag: webhookETag(w.ID, w.Generation)}}, nil
}

// ListWebhookDeliveries lists a subscription's delivery attempts.
func (s *Server) ListWebhookDeliveries(ctx context.Context, req api.ListWebhookDeliveriesRequestObject) (api.ListWebhookDeliveriesResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	ds, next, err := svc.Deliveries(ctx, req.WebhookId.String(), deref(req.Params.Limit), deref(req.Params.Cursor))
	if err != nil {
		return nil, err
	}
	out := api.ListWebhookDeliveries200JSONResponse{Items: make([]api.WebhookDelivery, 0, len(ds))}
	for _, d := range ds {
		item := api.WebhookDelivery{Id: strconv.FormatInt(d.ID, 10), EventId: strconv.FormatInt(d.EventID, 10), Sequence: d.Sequence,
			Attempt: d.Attempt, At: d.At, Outcome: api.WebhookDeliveryOutcome("failed"), LatencyMs: int(d.Latency.Milliseconds())}
		if d.Succeeded {
			item.Outcome = "succeeded"
		}
		if d.StatusCode != 0 {
			item.StatusCode = ptr(d.StatusCode)
		}
		if d.Error != "" {
			item.Error = ptr(d.Error)
		}
		if !d.NextRetryAt.IsZero() {
			item.NextRetryAt = ptr(d.NextRetryAt)
		}
		out.Items = append(out.Items, item)
	}
	if next != "" {
		out.NextCursor = &next
	}
	return out, nil
}

// RedeliverWebhook queues an attempt's event again.
func (s *Server) RedeliverWebhook(ctx context.Context, req api.RedeliverWebhookRequestObject) (api.RedeliverWebhookResponseObject, error) {
	svc, err := s.webhookService()
	if err != nil {
		return nil, err
	}
	id, err := strconv.ParseInt(req.DeliveryId, 10, 64)
	if err != nil {
		return nil, &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "deliveryId is not a delivery id",
			Fields: []lifecycle.FieldError{{Pointer: "path/deliveryId", Detail: "not a decimal id"}}}
	}
	if err := svc.Redeliver(ctx, req.WebhookId.String(), id); err != nil {
		return nil, err
	}
	return api.RedeliverWebhook202Response{}, nil
}
