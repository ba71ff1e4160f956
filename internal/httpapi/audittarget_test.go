package httpapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// TestAuditFiltersByTarget: targetKind and targetId select the calls
// addressed to one resource (its path or a path below it), and nothing of
// another resource whose path merely begins the same way or matches a LIKE
// wildcard.
func TestAuditFiltersByTarget(t *testing.T) {
	e := newOpsEnv(t)
	dev, id := e.setup(t, map[string]string{"1.0.0": "", "2.0.0": ""}, "1.0.0")
	res := e.upgrade(t, id, sdk.UpgradeRequest{TargetVersion: "2.0.0"})
	require.Equal(t, http.StatusAccepted, res.StatusCode(), string(res.Body))

	r, body := dev.do("PUT", "/api/v1/capabilities/edge2", capabilities("edge2", "compose"))
	require.Equal(t, http.StatusCreated, r.StatusCode, string(body))
	other := e.deploy(t, "plant", "edge2", "svc", "1.0.0").Id.String()
	// Called with the id in upper case (a UUID in a path is accepted in any
	// case): the entry records it in lower case, so the filter finds it.
	del, err := e.mgmt.DeleteDeploymentWithResponse(t.Context(), strings.ToUpper(other), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, del.StatusCode(), string(del.Body))

	lab, err := e.mgmt.PutDeviceLabelsWithResponse(t.Context(), "plant", "edge", sdk.DeviceLabels{Labels: sdk.Labels{"line": "a"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, lab.StatusCode(), string(lab.Body))
	// A refused call is audited too, under its target.
	gone, err := e.mgmt.DeleteApplicationVersionWithResponse(t.Context(), "svc", "9.9.9")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, gone.StatusCode(), string(gone.Body))

	actions := func(kind, target string) []string {
		t.Helper()
		k := sdk.AuditTargetKind(kind)
		list, err := e.mgmt.ListAuditWithResponse(t.Context(), &sdk.ListAuditParams{TargetKind: &k, TargetId: &target})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		out := []string{}
		for _, it := range list.JSON200.Items {
			out = append(out, it.Action+" "+it.Target)
		}
		return out
	}
	tests := []struct {
		kind, id string
		want     []string
	}{
		// The creation addressed the collection (POST /mgmt/v1/deployments).
		{"deployment", id, []string{"upgradeDeployment /mgmt/v1/deployments/" + id + "/upgrade"}},
		{"deployment", strings.ToUpper(other), []string{"deleteDeployment /mgmt/v1/deployments/" + other}},
		{"device", "plant/edge", []string{"putDeviceLabels /mgmt/v1/clients/plant/devices/edge/labels"}},
		{"device", "plant/edge2", []string{}},
		{"client", "plant", []string{"putDeviceLabels /mgmt/v1/clients/plant/devices/edge/labels"}},
		{"application", "svc", []string{"deleteApplicationVersion /mgmt/v1/applications/svc/versions/9.9.9"}},
		// Wildcards of LIKE match only themselves; a prefix of an id is
		// another id.
		{"application", "sv_", []string{}},
		{"application", "sv%", []string{}},
		{"application", "sv", []string{}},
		{"client", "pla", []string{}},
		{"rollout", "6affc112-0000-4000-8000-000000000000", []string{}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, actions(tt.kind, tt.id), "targetKind=%s&targetId=%s", tt.kind, tt.id)
	}
}

// TestAuditTargetFilterRefusals: a bad target filter is a problem naming
// the parameter, and no audit entry is read.
func TestAuditTargetFilterRefusals(t *testing.T) {
	e := newOpsEnv(t)
	tests := []struct {
		query  string
		status int
		field  string
	}{
		{"targetKind=planet&targetId=x", http.StatusBadRequest, "query/targetKind"},
		{"targetId=x", http.StatusUnprocessableEntity, "query/targetKind"},
		{"targetKind=token", http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=deployment&targetId=not-a-uuid", http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=webhook&targetId=" + url.QueryEscape("{6affc112-0000-4000-8000-000000000000}"), http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=device&targetId=plant", http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=device&targetId=plant/edge/x", http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=client&targetId=plant/devices", http.StatusUnprocessableEntity, "query/targetId"},
		{"targetKind=token&targetId=", http.StatusBadRequest, "query/targetId"},
		{"targetKind=token&targetId=" + strings.Repeat("x", 513), http.StatusBadRequest, "query/targetId"},
		{"targetKind=token&targetId=a%00", http.StatusBadRequest, "query/targetId"},
		{"target=deployment", http.StatusBadRequest, "query/target"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			p := readProblem(t, rawCall(t, "GET", e.url+"/mgmt/v1/audit?"+tt.query, "", ""), tt.status)
			require.NotEmpty(t, p.Errors, "%+v", p)
			assert.Equal(t, tt.field, p.Errors[0].Field, "%+v", p)
		})
	}
}
