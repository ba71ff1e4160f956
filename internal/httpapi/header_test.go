package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/internal/fleet"
	"github.com/wfm-dev/wfm/internal/httpapi"
)

// TestOversizedHeadersAreProblems: headers over httpapi.MaxHeaderBytes get a
// 431 problem from the handler on both listeners (Go's own limit, set
// above it, would answer in plain text); headers under it pass.
func TestOversizedHeadersAreProblems(t *testing.T) {
	e := newFleetEnv(t, fleet.Policy{AcceptAll: true})
	dev := e.client(t, "plant")
	big := strings.Repeat("a", httpapi.MaxHeaderBytes)
	for _, c := range []struct {
		name string
		url  string
		do   func(*http.Request) (*http.Response, error)
	}{
		{"management", e.mgmtURL + "/mgmt/v1/applications", adminHTTP.Do},
		{"device", e.deviceURL + "/api/v1/deployments", dev.http.Do},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), "GET", c.url, nil)
			require.NoError(t, err)
			req.Header.Set("X-Padding", big)
			res, err := c.do(req)
			require.NoError(t, err)
			p := readProblem(t, res, http.StatusRequestHeaderFieldsTooLarge)
			assert.Equal(t, httpapi.ProblemBase+"headers-too-large", p.Type)

			req, err = http.NewRequestWithContext(t.Context(), "GET", c.url, nil)
			require.NoError(t, err)
			req.Header.Set("X-Padding", big[:httpapi.MaxHeaderBytes/2])
			res, err = c.do(req)
			require.NoError(t, err)
			res.Body.Close()
			assert.Equal(t, http.StatusOK, res.StatusCode)
		})
	}
}
