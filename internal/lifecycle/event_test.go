package lifecycle

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allBodies holds one value of every body struct.
var allBodies = []EventBody{
	DeploymentStateChangedBody{}, RevisionPublishedBody{},
	OperationCreatedBody{}, OperationStartedBody{}, OperationStepPublishedBody{},
	OperationSucceededBody{}, OperationFailedBody{}, OperationCancelledBody{},
	DeviceRegisteredBody{}, DeviceUnregisteredBody{},
	ClientAcceptedBody{}, ClientRetiredBody{},
	ApplicationVersionAddedBody{}, ApplicationVersionYankedBody{}, ApplicationVersionUnyankedBody{}, ApplicationVersionDeletedBody{},
	TokenCreatedBody{}, TokenRevokedBody{}, WebhookDisabledBody{},
	RolloutCreatedBody{}, RolloutStateChangedBody{}, RolloutWaveStartedBody{}, RolloutWaveSettledBody{}, RolloutMemberExcludedBody{},
}

// unknownBody claims a type the table does not know.
type unknownBody struct{}

func (unknownBody) EventType() EventType { return "rollout.imagined" }

// hugeBody marshals to more than MaxEventBody bytes.
type hugeBody struct{ Blob string }

func (hugeBody) EventType() EventType { return EventClientRetired }

func TestEventTypesHaveOneBodyEach(t *testing.T) {
	var fromBodies []EventType
	for _, b := range allBodies {
		fromBodies = append(fromBodies, b.EventType())
	}
	slices.Sort(fromBodies)
	assert.Equal(t, EventTypes(), fromBodies, "types of the body structs")
	for _, typ := range EventTypes() {
		kind, ok := typ.SubjectKind()
		require.True(t, ok, "%s.SubjectKind()", typ)
		assert.True(t, strings.HasPrefix(string(typ), string(kind)+".") || typ == EventRevisionPublished,
			"type %s should be named after its subject kind %s", typ, kind)
	}
}

func TestNewEvent(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	dep := Ref{Kind: SubjectDeployment, ID: "0b6a3c5e-0000-4000-8000-000000000001"}
	app := Ref{Kind: SubjectApplication, ID: "nginx"}
	tests := []struct {
		name    string
		actor   string
		subject Ref
		body    EventBody
		related []Ref
		want    Code
	}{
		{"state change", "device:spiffe://wfm/c1", dep, DeploymentStateChangedBody{From: StatePending, To: StateInstalling, Cause: "report", Revision: 1}, []Ref{app}, ""},
		{"related deduplicated", "admin", dep, RevisionPublishedBody{Revision: 2, Version: "1.2.0", Operation: "upgrade"}, []Ref{app, dep, app, {Kind: SubjectClient}}, ""},
		{"unknown type", "admin", dep, unknownBody{}, nil, EINVALID},
		{"wrong subject kind", "admin", app, DeploymentStateChangedBody{}, nil, EINVALID},
		{"empty subject id", "admin", Ref{Kind: SubjectDeployment}, DeploymentStateChangedBody{}, nil, EINVALID},
		{"empty actor", " ", dep, DeploymentStateChangedBody{}, nil, EINVALID},
		{"actor not UTF-8", "\xff", dep, DeploymentStateChangedBody{}, nil, EINVALID},
		{"body too large", "admin", Ref{Kind: SubjectClient, ID: "c1"}, hugeBody{Blob: strings.Repeat("x", MaxEventBody)}, nil, EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEvent(at, tt.actor, tt.subject, tt.body, tt.related...)
			if tt.want != "" {
				assert.Equal(t, tt.want, ErrorCode(err), "NewEvent error = %v, want code %s", err, tt.want)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.body.EventType(), e.Type)
			assert.Equal(t, at, e.At)
			assert.Equal(t, tt.subject, e.Subject)
			assert.Equal(t, tt.actor, e.Actor)
			assert.Zero(t, e.ID, "ID before the store assigns one")
			assert.NotContains(t, e.Related, tt.subject, "Related must not repeat the subject")
			assert.Equal(t, e.Subject, e.Refs()[0])
			for i, r := range e.Related {
				assert.NotEmpty(t, r.ID)
				assert.NotContains(t, e.Related[i+1:], r, "Related repeats %v", r)
			}
			want, err := json.Marshal(tt.body)
			require.NoError(t, err)
			assert.JSONEq(t, string(want), string(e.Body))
		})
	}
}

func TestRefString(t *testing.T) {
	tests := []struct {
		ref  Ref
		want string
	}{
		{Ref{Kind: SubjectClient, ID: "c1"}, "client:c1"},
		{DeviceRef("c1", "dev/1"), "device:c1/dev/1"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.ref.String(), "%#v.String()", tt.ref)
	}
}

func TestEventVisibility(t *testing.T) {
	for _, typ := range EventTypes() {
		v, ok := typ.Visibility()
		if !ok || (v != VisibilityViewer && v != VisibilityAdmin) {
			t.Errorf("%s: visibility %q, %v", typ, v, ok)
		}
	}
	for typ, want := range map[EventType]Visibility{
		EventDeploymentStateChanged:  VisibilityViewer,
		EventRolloutStateChanged:     VisibilityViewer,
		EventApplicationVersionAdded: VisibilityViewer,
		EventDeviceRegistered:        VisibilityViewer,
		EventTokenCreated:            VisibilityAdmin,
		EventClientAccepted:          VisibilityAdmin,
		EventWebhookDisabled:         VisibilityAdmin,
	} {
		if got, _ := typ.Visibility(); got != want {
			t.Errorf("%s: %q, want %q", typ, got, want)
		}
	}
	if _, ok := EventType("nope.nope").Visibility(); ok {
		t.Error("an unknown type has a visibility")
	}
	viewer, admin := EventTypesVisibleTo(VisibilityViewer), EventTypesVisibleTo(VisibilityAdmin)
	if len(admin) != len(EventTypes()) || len(viewer) == 0 || len(viewer) >= len(admin) {
		t.Fatalf("viewer %d, admin %d of %d", len(viewer), len(admin), len(EventTypes()))
	}
	for _, typ := range viewer {
		if v, _ := typ.Visibility(); v != VisibilityViewer {
			t.Errorf("viewer sees %s", typ)
		}
	}
}
