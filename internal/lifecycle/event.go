package lifecycle

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The event model lives here, beside the decisions, rather than in a package
// of its own: the decisions of this package return the events they cause as
// part of their value (design section 12), and the bodies carry this
// package's types (State). A separate package would have to import lifecycle
// for those and for Error, and lifecycle would have to import it back to
// return events: a cycle. The model is as pure as the rest of the package:
// the time of an event is a parameter, and the store assigns the id.

// EventType names what happened. Types are stable strings of the form
// "<subject>.<what>"; consumers (the event stream, webhooks) filter by them
// and by their prefix ("operation.").
type EventType string

// The event types. Each has one subject kind (see EventType.SubjectKind) and
// one body struct, named after it (EventDeploymentStateChanged has
// DeploymentStateChangedBody).
const (
	EventDeploymentStateChanged EventType = "deployment.state_changed"
	EventRevisionPublished      EventType = "revision.published"

	EventOperationCreated       EventType = "operation.created"
	EventOperationStarted       EventType = "operation.started"
	EventOperationStepPublished EventType = "operation.step_published"
	EventOperationSucceeded     EventType = "operation.succeeded"
	EventOperationFailed        EventType = "operation.failed"
	EventOperationCancelled     EventType = "operation.cancelled"

	EventDeviceRegistered   EventType = "device.registered"
	EventDeviceUnregistered EventType = "device.unregistered"

	EventClientAccepted EventType = "client.accepted"
	EventClientRetired  EventType = "client.retired"

	EventApplicationVersionAdded    EventType = "application.version_added"
	EventApplicationVersionYanked   EventType = "application.version_yanked"
	EventApplicationVersionUnyanked EventType = "application.version_unyanked"
	EventApplicationVersionDeleted  EventType = "application.version_deleted"

	EventTokenCreated EventType = "token.created"
	EventTokenRevoked EventType = "token.revoked"

	EventRolloutCreated        EventType = "rollout.created"
	EventRolloutStateChanged   EventType = "rollout.state_changed"
	EventRolloutWaveStarted    EventType = "rollout.wave_started"
	EventRolloutWaveSettled    EventType = "rollout.wave_settled"
	EventRolloutMemberExcluded EventType = "rollout.member_excluded"

	EventWebhookDisabled EventType = "webhook.disabled"
)

// SubjectKind is the kind of thing an event is about.
type SubjectKind string

// The subject kinds.
const (
	SubjectDeployment  SubjectKind = "deployment"  // id: the deployment's UUID
	SubjectOperation   SubjectKind = "operation"   // id: the operation's UUID
	SubjectDevice      SubjectKind = "device"      // id: "<clientId>/<deviceId>" (client ids hold no "/")
	SubjectClient      SubjectKind = "client"      // id: the client id
	SubjectApplication SubjectKind = "application" // id: the application id
	SubjectToken       SubjectKind = "token"       // id: the token id
	SubjectRollout     SubjectKind = "rollout"     // id: the rollout's UUID
	SubjectWebhook     SubjectKind = "webhook"     // id: the subscription's UUID
)

// eventSubjects is the table of event types: each type's subject kind. A
// type not in it is unknown. Adding a type means adding its row here, its
// body struct below and its row in docs/architecture.md ("Event log").
var eventSubjects = map[EventType]SubjectKind{
	EventDeploymentStateChanged:     SubjectDeployment,
	EventRevisionPublished:          SubjectDeployment,
	EventOperationCreated:           SubjectOperation,
	EventOperationStarted:           SubjectOperation,
	EventOperationStepPublished:     SubjectOperation,
	EventOperationSucceeded:         SubjectOperation,
	EventOperationFailed:            SubjectOperation,
	EventOperationCancelled:         SubjectOperation,
	EventDeviceRegistered:           SubjectDevice,
	EventDeviceUnregistered:         SubjectDevice,
	EventClientAccepted:             SubjectClient,
	EventClientRetired:              SubjectClient,
	EventApplicationVersionAdded:    SubjectApplication,
	EventApplicationVersionYanked:   SubjectApplication,
	EventApplicationVersionUnyanked: SubjectApplication,
	EventApplicationVersionDeleted:  SubjectApplication,
	EventTokenCreated:               SubjectToken,
	EventTokenRevoked:               SubjectToken,
	EventRolloutCreated:             SubjectRollout,
	EventRolloutStateChanged:        SubjectRollout,
	EventRolloutWaveStarted:         SubjectRollout,
	EventRolloutWaveSettled:         SubjectRollout,
	EventRolloutMemberExcluded:      SubjectRollout,
	EventWebhookDisabled:            SubjectWebhook,
}

// Visibility says who may read events of a type: everyone who may read the
// fleet (a viewer, and so operators and admins), or only admins.
type Visibility string

// The visibilities.
const (
	// VisibilityViewer: about the fleet (deployments, operations, rollouts,
	// devices, applications); a viewer may read them.
	VisibilityViewer Visibility = "viewer"
	// VisibilityAdmin: about access (tokens, clients) and webhooks; only an
	// admin may read them, as only an admin may read tokens, clients,
	// webhooks and the audit log.
	VisibilityAdmin Visibility = "admin"
)

// subjectVisibility is who may read events about each subject kind. It
// follows the management API's read rules: a viewer reads deployments,
// operations, rollouts, devices and applications; tokens and clients are an
// admin's.
var subjectVisibility = map[SubjectKind]Visibility{
	SubjectDeployment:  VisibilityViewer,
	SubjectOperation:   VisibilityViewer,
	SubjectDevice:      VisibilityViewer,
	SubjectApplication: VisibilityViewer,
	SubjectRollout:     VisibilityViewer,
	SubjectClient:      VisibilityAdmin,
	SubjectToken:       VisibilityAdmin,
	SubjectWebhook:     VisibilityAdmin,
}

// Visibility returns who may read events of type t, and false if t is not a
// known type.
func (t EventType) Visibility() (Visibility, bool) {
	k, ok := eventSubjects[t]
	if !ok {
		return "", false
	}
	return subjectVisibility[k], true
}

// EventTypesVisibleTo returns the known event types of visibility v or a
// lower one (VisibilityAdmin: every type; VisibilityViewer: the viewer's),
// sorted.
func EventTypesVisibleTo(v Visibility) []EventType {
	var out []EventType
	for _, t := range EventTypes() {
		tv, _ := t.Visibility()
		if tv == VisibilityViewer || v == VisibilityAdmin {
			out = append(out, t)
		}
	}
	return out
}

// EventTypes returns every known event type, sorted.
func EventTypes() []EventType {
	types := make([]EventType, 0, len(eventSubjects))
	for t := range eventSubjects {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// SubjectKind returns the kind of subject events of type t are about, and
// false if t is not a known type.
func (t EventType) SubjectKind() (SubjectKind, bool) {
	k, ok := eventSubjects[t]
	return k, ok
}

// Ref names one thing an event is about or related to.
type Ref struct {
	Kind SubjectKind
	ID   string
}

// String returns "kind:id", the form the store indexes and filters by.
func (r Ref) String() string { return string(r.Kind) + ":" + r.ID }

// DeviceRef returns the reference of device deviceID of client clientID.
func DeviceRef(clientID, deviceID string) Ref {
	return Ref{Kind: SubjectDevice, ID: clientID + "/" + deviceID}
}

// MaxEventBody is the largest body an event may carry, in bytes of JSON.
// Events say what happened, not the whole new state: a consumer that needs
// more reads the subject.
const MaxEventBody = 4 << 10

// Event is one entry of the event log: something that happened, recorded in
// the transaction of the change that made it happen.
type Event struct {
	// ID is the event's position in the log, assigned by the store when the
	// event is appended (zero before). Ids increase in the order in which
	// readers see events; see the store for the guarantee.
	ID int64
	// Type says what happened and which body struct Body holds.
	Type EventType
	// At is when the change was decided (the decision's clock, not the
	// database's).
	At time.Time
	// Subject is the thing that changed; its kind is Type's SubjectKind.
	Subject Ref
	// Related lists other things the event concerns, so that a consumer can
	// filter by them without reading the subject (a deployment's application,
	// client and device). Never holds Subject.
	Related []Ref
	// Actor is who caused the change: a token's actor name, a device's
	// SPIFFE ID, or "wfm" for the server's own scheduler.
	Actor string
	// Body is the type's body struct as JSON (at most MaxEventBody bytes).
	Body json.RawMessage
}

// EventBody is implemented by the body struct of each event type.
type EventBody interface {
	// EventType returns the type whose body this is.
	EventType() EventType
}

// NewEvent returns the event of body about subject, caused by actor at at.
// Related refs that equal the subject or repeat are dropped.
//
// Returns EINVALID if the body's type is unknown, the subject's kind is not
// the type's subject kind, the subject id or actor is empty or not UTF-8, or
// the body marshals to more than MaxEventBody bytes.
func NewEvent(at time.Time, actor string, subject Ref, body EventBody, related ...Ref) (Event, error) {
	typ := body.EventType()
	kind, ok := typ.SubjectKind()
	if !ok {
		return Event{}, Errorf(EINVALID, "unknown event type %q", typ)
	}
	if subject.Kind != kind {
		return Event{}, Errorf(EINVALID, "event %s is about a %s, not a %s", typ, kind, subject.Kind)
	}
	if subject.ID == "" || !utf8.ValidString(subject.ID) {
		return Event{}, Errorf(EINVALID, "event %s: subject id must be non-empty UTF-8", typ)
	}
	if strings.TrimSpace(actor) == "" || !utf8.ValidString(actor) {
		return Event{}, Errorf(EINVALID, "event %s: actor must be non-empty UTF-8", typ)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Event{}, Errorf(EINVALID, "event %s: body: %v", typ, err)
	}
	if len(raw) > MaxEventBody {
		return Event{}, Errorf(EINVALID, "event %s: body of %d bytes exceeds %d", typ, len(raw), MaxEventBody)
	}
	var rel []Ref
	for _, r := range related {
		if r == subject || r.ID == "" || slices.Contains(rel, r) {
			continue
		}
		rel = append(rel, r)
	}
	return Event{Type: typ, At: at, Subject: subject, Related: rel, Actor: actor, Body: raw}, nil
}

// wireRef is the JSON of a Ref (the contract's EventRef).
type wireRef struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// wireEvent is the JSON of an event (the contract's Event, and with
// Sequence its WebhookEvent), the body carried as the exact bytes stored.
type wireEvent struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	At       time.Time       `json:"at"`
	Subject  wireRef         `json:"subject"`
	Related  []wireRef       `json:"related"`
	Actor    string          `json:"actor"`
	Data     json.RawMessage `json:"data"`
	Sequence int64           `json:"sequence,omitempty"`
}

// WireJSON returns e as its consumers receive it, the one conversion of an
// event to JSON (the event stream's data lines, its JSON pages, webhook
// bodies): the contract's Event schema, the id as a decimal string (ids
// exceed 2^53), the time in UTC, the body as data. A sequence above zero
// (a webhook's per-subject sequence number) is added as "sequence", which
// makes it the contract's WebhookEvent.
//
// Returns an error if the body is not valid JSON.
func (e Event) WireJSON(sequence int64) ([]byte, error) {
	w := wireEvent{ID: strconv.FormatInt(e.ID, 10), Type: string(e.Type), At: e.At.UTC(),
		Subject: wireRef{Kind: string(e.Subject.Kind), ID: e.Subject.ID}, Related: make([]wireRef, len(e.Related)),
		Actor: e.Actor, Data: e.Body, Sequence: sequence}
	for i, r := range e.Related {
		w.Related[i] = wireRef{Kind: string(r.Kind), ID: r.ID}
	}
	if len(w.Data) == 0 {
		w.Data = json.RawMessage("{}")
	}
	out, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("encode event %d: %w", e.ID, err)
	}
	return out, nil
}

// Refs returns the subject followed by the related refs: everything a
// consumer may filter the event by.
func (e Event) Refs() []Ref {
	return append([]Ref{e.Subject}, e.Related...)
}

// Body structs, one per event type. Their JSON is the event's body as the
// stream and webhooks deliver it; fields are only ever added, never renamed.
// Ids of the subject and of related things are not repeated in bodies (they
// are the event's Subject and Related).

// DeploymentStateChangedBody is the body of deployment.state_changed: the
// deployment's lifecycle state moved. Related: its application, client and
// device.
type DeploymentStateChangedBody struct {
	// From is the state before the change ("" for a new deployment).
	From State `json:"from"`
	// To is the state after the change.
	To State `json:"to"`
	// Cause is what moved it: report, operation, deadline, operator or
	// device-unregistered (as in the deployment's history).
	Cause string `json:"cause"`
	// Reason is a machine-readable reason (for example "InstallFailed"), may
	// be empty.
	Reason string `json:"reason,omitempty"`
	// Message is a sentence for a person, may be empty.
	Message string `json:"message,omitempty"`
	// Revision is the desired revision at the time of the change.
	Revision int `json:"revision"`
	// OperationID is the operation that caused the change, if any.
	OperationID string `json:"operationId,omitempty"`
}

// EventType implements EventBody.
func (DeploymentStateChangedBody) EventType() EventType { return EventDeploymentStateChanged }

// RevisionPublishedBody is the body of revision.published: a new revision of a
// deployment became its desired state and is in its client's manifest.
// Related: its application, client and device.
type RevisionPublishedBody struct {
	// Revision is the new revision's number (1 for the first install).
	Revision int `json:"revision"`
	// Version is the application version the revision runs.
	Version string `json:"version"`
	// Operation is what the revision does: install, upgrade, reconfigure,
	// rollback or remove.
	Operation string `json:"operation"`
	// ManifestVersion is the client's manifest version that carries it.
	ManifestVersion int64 `json:"manifestVersion"`
	// OperationID is the lifecycle operation that published it, if any.
	OperationID string `json:"operationId,omitempty"`
}

// EventType implements EventBody.
func (RevisionPublishedBody) EventType() EventType { return EventRevisionPublished }

// OperationCreatedBody is the body of operation.created: a lifecycle operation
// was accepted and queued. Related: its deployment and application.
type OperationCreatedBody struct {
	// Operation is the operation type: install, upgrade, reconfigure,
	// rollback or remove.
	Operation string `json:"operation"`
	// FromVersion is the version installed when it was created ("" for an
	// install).
	FromVersion string `json:"fromVersion,omitempty"`
	// ToVersion is the version it leads to (for a remove, the version
	// removed).
	ToVersion string `json:"toVersion"`
	// Steps is the number of revisions it plans to publish (upgrade hops;
	// 0 for a remove).
	Steps int `json:"steps"`
	// Forced is true when an admin overrode a policy refusal.
	Forced bool `json:"forced,omitempty"`
	// Deadline is when it fails if not finished.
	Deadline time.Time `json:"deadline"`
}

// EventType implements EventBody.
func (OperationCreatedBody) EventType() EventType { return EventOperationCreated }

// OperationStartedBody is the body of operation.started: the scheduler began
// the operation. Related: its deployment.
type OperationStartedBody struct {
	// Operation is the operation type.
	Operation string `json:"operation"`
}

// EventType implements EventBody.
func (OperationStartedBody) EventType() EventType { return EventOperationStarted }

// OperationStepPublishedBody is the body of operation.step_published: one step
// (one hop of an upgrade path) was published as a revision. Related: its
// deployment.
type OperationStepPublishedBody struct {
	// Step is the step's number, from 1.
	Step int `json:"step"`
	// Steps is the operation's number of steps.
	Steps int `json:"steps"`
	// Version is the version the step installs.
	Version string `json:"version"`
	// Revision is the deployment revision that carries it.
	Revision int `json:"revision"`
}

// EventType implements EventBody.
func (OperationStepPublishedBody) EventType() EventType { return EventOperationStepPublished }

// OperationSucceededBody is the body of operation.succeeded: the device
// confirmed the operation's last step. Related: its deployment.
type OperationSucceededBody struct {
	// Operation is the operation type.
	Operation string `json:"operation"`
	// Version is the version now installed.
	Version string `json:"version"`
}

// EventType implements EventBody.
func (OperationSucceededBody) EventType() EventType { return EventOperationSucceeded }

// OperationFailedBody is the body of operation.failed. Related: its deployment.
type OperationFailedBody struct {
	// Operation is the operation type.
	Operation string `json:"operation"`
	// Reason is a machine-readable reason (for example "DeadlineExceeded",
	// "StepFailed").
	Reason string `json:"reason"`
	// Message is a sentence for a person.
	Message string `json:"message,omitempty"`
	// Step is the step that failed (0 if none had started).
	Step int `json:"step,omitempty"`
	// RollingBack is true when the failure policy started a rollback.
	RollingBack bool `json:"rollingBack,omitempty"`
}

// EventType implements EventBody.
func (OperationFailedBody) EventType() EventType { return EventOperationFailed }

// OperationCancelledBody is the body of operation.cancelled. Related: its
// deployment.
type OperationCancelledBody struct {
	// Operation is the operation type.
	Operation string `json:"operation"`
	// Reason says why (for example "CancelledByOperator",
	// "DeploymentRemoved").
	Reason string `json:"reason"`
}

// EventType implements EventBody.
func (OperationCancelledBody) EventType() EventType { return EventOperationCancelled }

// DeviceRegisteredBody is the body of device.registered: a device registered
// with its capabilities (or registered again). Related: its client.
type DeviceRegisteredBody struct {
	// Reregistered is true when the device was known before.
	Reregistered bool `json:"reregistered,omitempty"`
}

// EventType implements EventBody.
func (DeviceRegisteredBody) EventType() EventType { return EventDeviceRegistered }

// DeviceUnregisteredBody is the body of device.unregistered. Related: its
// client.
type DeviceUnregisteredBody struct {
	// RemovedDeployments is how many deployments the unregistration ended.
	RemovedDeployments int `json:"removedDeployments"`
}

// EventType implements EventBody.
func (DeviceUnregisteredBody) EventType() EventType { return EventDeviceUnregistered }

// ClientAcceptedBody is the body of client.accepted: a client (a device agent's
// identity) was accepted, first or again.
type ClientAcceptedBody struct {
	// SPIFFEID is the client's SPIFFE ID.
	SPIFFEID string `json:"spiffeId,omitempty"`
}

// EventType implements EventBody.
func (ClientAcceptedBody) EventType() EventType { return EventClientAccepted }

// ClientRetiredBody is the body of client.retired.
type ClientRetiredBody struct {
	// Reason is the operator's reason, may be empty.
	Reason string `json:"reason,omitempty"`
}

// EventType implements EventBody.
func (ClientRetiredBody) EventType() EventType { return EventClientRetired }

// ApplicationVersionAddedBody is the body of application.version_added.
type ApplicationVersionAddedBody struct {
	// Version is the version added.
	Version string `json:"version"`
}

// EventType implements EventBody.
func (ApplicationVersionAddedBody) EventType() EventType { return EventApplicationVersionAdded }

// ApplicationVersionYankedBody is the body of application.version_yanked: no
// new deployment or upgrade may target the version.
type ApplicationVersionYankedBody struct {
	// Version is the version yanked.
	Version string `json:"version"`
	// Reason is the operator's reason, may be empty.
	Reason string `json:"reason,omitempty"`
}

// EventType implements EventBody.
func (ApplicationVersionYankedBody) EventType() EventType { return EventApplicationVersionYanked }

// ApplicationVersionUnyankedBody is the body of application.version_unyanked.
type ApplicationVersionUnyankedBody struct {
	// Version is the version made available again.
	Version string `json:"version"`
}

// EventType implements EventBody.
func (ApplicationVersionUnyankedBody) EventType() EventType { return EventApplicationVersionUnyanked }

// ApplicationVersionDeletedBody is the body of application.version_deleted.
type ApplicationVersionDeletedBody struct {
	// Version is the version deleted.
	Version string `json:"version"`
}

// EventType implements EventBody.
func (ApplicationVersionDeletedBody) EventType() EventType { return EventApplicationVersionDeleted }

// TokenCreatedBody is the body of token.created. The secret is never in it.
type TokenCreatedBody struct {
	// Name is the token's name.
	Name string `json:"name"`
	// Role is the token's role: viewer, operator or admin.
	Role string `json:"role"`
	// ExpiresAt is when the token expires, if it does.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// EventType implements EventBody.
func (TokenCreatedBody) EventType() EventType { return EventTokenCreated }

// TokenRevokedBody is the body of token.revoked.
type TokenRevokedBody struct {
	// Name is the token's name.
	Name string `json:"name"`
}

// EventType implements EventBody.
func (TokenRevokedBody) EventType() EventType { return EventTokenRevoked }

// WebhookDisabledBody is the body of webhook.disabled: the server disabled a
// webhook subscription (see WebhookAttempt). An admin enables it again.
type WebhookDisabledBody struct {
	// Reason is "gone" (the receiver answered 410) or "failures" (too many
	// consecutive failed attempts).
	Reason string `json:"reason"`
	// ConsecutiveFailures is the run of failed attempts that ended it.
	ConsecutiveFailures int `json:"consecutiveFailures"`
	// LastError says what the last attempt got.
	LastError string `json:"lastError,omitempty"`
}

// EventType implements EventBody.
func (WebhookDisabledBody) EventType() EventType { return EventWebhookDisabled }
