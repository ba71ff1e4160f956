package httpapi_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// TestSDKHelpers uses the SDK's hand-written helpers against the real
// server: the bearer-token option and per-call editor, and the reading of a
// problem from a parsed response (ClientWithResponses) and from a raw one
// (Client), members beyond RFC 9457's included.
func TestSDKHelpers(t *testing.T) {
	e := newOpsEnv(t)
	_, id := e.setup(t, map[string]string{"1.0.0": ""}, "1.0.0")
	const missing = "6affc112-0000-4000-8000-000000000000"

	t.Run("bearer token option, trimmed as read from a file", func(t *testing.T) {
		c, err := sdk.NewClientWithResponses(e.url, sdk.WithBearerToken(adminToken+"\n"))
		require.NoError(t, err)
		res, err := c.GetDeploymentWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		assert.Nil(t, sdk.ProblemOf(res.HTTPResponse, res.Body), "a success is no problem")
	})

	t.Run("empty token refused by the constructor", func(t *testing.T) {
		_, err := sdk.NewClientWithResponses(e.url, sdk.WithBearerToken(" \n"))
		require.Error(t, err)
	})

	t.Run("no token, then a per-call token", func(t *testing.T) {
		c, err := sdk.NewClientWithResponses(e.url)
		require.NoError(t, err)
		res, err := c.GetDeploymentWithResponse(t.Context(), id)
		require.NoError(t, err)
		p := sdk.ProblemOf(res.HTTPResponse, res.Body)
		require.NotNil(t, p)
		assert.Equal(t, http.StatusUnauthorized, p.Status)
		assert.Equal(t, "unauthorized", p.Name())

		admin, err := sdk.BearerToken(adminToken)
		require.NoError(t, err)
		res, err = c.GetDeploymentWithResponse(t.Context(), id, admin)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	})

	t.Run("problem of a parsed response, as an error", func(t *testing.T) {
		c, err := sdk.NewClientWithResponses(e.url, sdk.WithBearerToken(adminToken))
		require.NoError(t, err)
		res, err := c.GetDeploymentWithResponse(t.Context(), missing)
		require.NoError(t, err)
		var perr error = sdk.ProblemOf(res.HTTPResponse, res.Body)
		require.NotNil(t, perr)
		p := perr.(*sdk.Problem)
		assert.Equal(t, http.StatusNotFound, p.Status)
		assert.Equal(t, "not-found", p.Name())
		require.NotNil(t, p.RequestId)
		assert.Equal(t, res.HTTPResponse.Header.Get("X-Request-Id"), *p.RequestId)
		assert.Contains(t, perr.Error(), "404 not-found: ")
		assert.Contains(t, perr.Error(), "(request "+*p.RequestId+")")

		// A problem's own members (RFC 9457 extension members).
		up, err := c.UpgradeDeploymentWithResponse(t.Context(), id, nil, sdk.UpgradeRequest{TargetVersion: "1.0.0"})
		require.NoError(t, err)
		p = sdk.ProblemOf(up.HTTPResponse, up.Body)
		require.NotNil(t, p)
		assert.Equal(t, "already-at-version", p.Name())
		assert.Equal(t, "1.0.0", p.AdditionalProperties["installed"])
	})

	t.Run("problem of a raw response", func(t *testing.T) {
		c, err := sdk.NewClient(e.url, sdk.WithBearerToken(adminToken))
		require.NoError(t, err)
		res, err := c.GetDeployment(t.Context(), missing)
		require.NoError(t, err)
		p := sdk.ReadProblem(res)
		require.NotNil(t, p)
		assert.Equal(t, "not-found", p.Name())

		res, err = c.GetDeployment(t.Context(), id)
		require.NoError(t, err)
		defer res.Body.Close()
		assert.Nil(t, sdk.ReadProblem(res))
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		assert.Contains(t, string(body), id, "a success's body is left to the caller")
	})
}
