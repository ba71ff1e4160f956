package lifecycle

import (
	"slices"
	"testing"
)

func TestSelectEventTypes(t *testing.T) {
	viewerAll := EventTypesVisibleTo(VisibilityViewer)
	cases := []struct {
		name  string
		v     Visibility
		specs []string
		want  []EventType
		code  Code
	}{
		{"viewer, nothing asked: every viewer type", VisibilityViewer, nil, viewerAll, ""},
		{"admin, nothing asked: every type", VisibilityAdmin, nil, EventTypes(), ""},
		{"one type", VisibilityViewer, []string{"operation.failed"}, []EventType{EventOperationFailed}, ""},
		{"comma list and repeat, deduplicated", VisibilityViewer, []string{"operation.failed,rollout.created", "operation.failed"},
			[]EventType{EventOperationFailed, EventRolloutCreated}, ""},
		{"prefix", VisibilityViewer, []string{"device."}, []EventType{EventDeviceRegistered, EventDeviceUnregistered}, ""},
		{"admin type for an admin", VisibilityAdmin, []string{"token."}, []EventType{EventTokenCreated, EventTokenRevoked}, ""},
		{"admin type for a viewer", VisibilityViewer, []string{"token.revoked"}, nil, EFORBIDDEN},
		{"admin prefix for a viewer", VisibilityViewer, []string{"client."}, nil, EFORBIDDEN},
		{"unknown type", VisibilityAdmin, []string{"rollout.exploded"}, nil, EMALFORMED},
		{"unknown prefix", VisibilityAdmin, []string{"nothing."}, nil, EMALFORMED},
		{"prefix without its dot is a type", VisibilityAdmin, []string{"rollout"}, nil, EMALFORMED},
		{"empty item", VisibilityAdmin, []string{"rollout.created,"}, nil, EMALFORMED},
	}
	for _, c := range cases {
		got, err := SelectEventTypes(c.v, c.specs)
		if ErrorCode(err) != c.code {
			t.Errorf("%s: SelectEventTypes(%s, %q) error %v, want code %q", c.name, c.v, c.specs, err, c.code)
			continue
		}
		if c.code == "" && !slices.Equal(got, c.want) {
			t.Errorf("%s: SelectEventTypes(%s, %q) = %v, want %v", c.name, c.v, c.specs, got, c.want)
		}
	}
}
