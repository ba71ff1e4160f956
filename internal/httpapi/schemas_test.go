package httpapi_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/internal/httpapi"
)

// TestServesSchemas fetches every embedded schema without a token, byte for
// byte with its media type and a strong ETag, and checks the refusals: an
// unknown name, a name the contract's pattern refuses, an unacceptable
// Accept.
func TestServesSchemas(t *testing.T) {
	srv := newTestServer(t, func(context.Context) error { return nil })
	names, err := fs.Glob(wfm.Schemas, "schemas/*.schema.json")
	require.NoError(t, err)
	require.Len(t, names, 2)
	for _, n := range names {
		want, err := fs.ReadFile(wfm.Schemas, n)
		require.NoError(t, err)
		res, err := http.Get(srv.URL + "/" + n)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, n)
		assert.Equal(t, "application/schema+json", res.Header.Get("Content-Type"), n)
		assert.Equal(t, want, body, "%s byte for byte", n)
		sum := sha256.Sum256(want)
		assert.Equal(t, `"`+hex.EncodeToString(sum[:])+`"`, res.Header.Get("ETag"), n)
	}

	res, err := http.Get(srv.URL + "/schemas/nope.schema.json")
	require.NoError(t, err)
	p := readProblem(t, res, http.StatusNotFound)
	assert.Equal(t, httpapi.ProblemBase+"not-found", p.Type)

	res, err = http.Get(srv.URL + "/schemas/..%2Fopenapi.yaml")
	require.NoError(t, err)
	readProblem(t, res, http.StatusBadRequest)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/schemas/lifecycle.schema.json", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/yaml")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	p = readProblem(t, res, http.StatusNotAcceptable)
	assert.Equal(t, httpapi.ProblemBase+"not-acceptable", p.Type)

	req.Header.Set("Accept", "application/schema+json;q=0, */*")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	readProblem(t, res, http.StatusNotAcceptable) // the schema's own type refused

	req.Header.Set("Accept", "application/json")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "application/json is acceptable")

	// A copy the caller holds is revalidated without a body.
	etag := res.Header.Get("ETag")
	req.Header.Set("If-None-Match", etag)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusNotModified, res.StatusCode)
	assert.Empty(t, body)
	assert.Equal(t, etag, res.Header.Get("ETag"))
	req.Header.Set("If-None-Match", `"stale"`)
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode, "another ETag: the document")

	// An unknown query parameter is refused, as on the management API.
	res, err = http.Get(srv.URL + "/schemas/lifecycle.schema.json?foo=1")
	require.NoError(t, err)
	p = readProblem(t, res, http.StatusBadRequest)
	require.NotEmpty(t, p.Errors)
	assert.Equal(t, "query/foo", p.Errors[0].Field)
}
