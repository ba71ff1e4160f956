package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/httpapi"
	"github.com/wfm-dev/wfm/sdk"
)

// examples are byte-identical copies of Margo's examples (shared/reference/margo/examples).
const examples = "../margo/testdata/"

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(examples + name)
	require.NoError(t, err)
	return b
}

func newCatalogClient(t *testing.T) (*sdk.ClientWithResponses, string) {
	t.Helper()
	srv := newTestServer(t, func(context.Context) error { return nil })
	return clientAs(t, srv.URL, adminToken), srv.URL
}

// minimal returns a small valid description of app id at version.
func minimal(id, version, extra string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
id: %s
metadata:
  name: Minimal %s
  version: %q
deploymentProfiles:
  - type: compose
    id: %s-compose
    components:
      - name: app
        properties:
          repository: oci://example.com/%s
          revision: %q
%s`, id, id, version, id, id, version, extra))
}

func postYAML(t *testing.T, c *sdk.ClientWithResponses, body []byte) *sdk.CreateApplicationVersionResponse {
	t.Helper()
	res, err := c.CreateApplicationVersionWithBodyWithResponse(t.Context(), nil, "application/yaml", bytes.NewReader(body))
	require.NoError(t, err)
	return res
}

func TestMargoExamplesRoundTrip(t *testing.T) {
	c, base := newCatalogClient(t)
	for _, name := range []string{"ApplicationDescription-001-hello_world.yaml", "ApplicationDescription-002-helm_and_compose.yaml"} {
		t.Run(name, func(t *testing.T) {
			raw := readExample(t, name)
			res := postYAML(t, c, raw)
			require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
			v := res.JSON201
			require.NotNil(t, v)
			loc := res.HTTPResponse.Header.Get("Location")
			assert.Equal(t, "/mgmt/v1/applications/"+v.ApplicationId+"/versions/"+v.Version, loc)
			assert.NotEmpty(t, res.HTTPResponse.Header.Get("ETag"))
			assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, v.Digest)
			assert.Equal(t, sdk.ApplicationVersionMediaType("application/yaml"), v.MediaType)

			// The original bytes, unchanged.
			req, _ := http.NewRequest("GET", base+loc, nil)
			req.Header.Set("Accept", "application/yaml")
			got, err := adminHTTP.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(got.Body)
			got.Body.Close()
			require.Equal(t, http.StatusOK, got.StatusCode)
			assert.Equal(t, "application/yaml", got.Header.Get("Content-Type"))
			assert.Equal(t, raw, body, "YAML bytes identical")

			// The JSON representation is equivalent to the YAML.
			one, err := c.GetApplicationVersionWithResponse(t.Context(), v.ApplicationId, v.Version, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, one.StatusCode())
			require.NotNil(t, one.JSON200.Description)
			var fromYAML, fromJSON any
			require.NoError(t, yaml.Unmarshal(raw, &fromYAML))
			require.NoError(t, json.Unmarshal(*one.JSON200.Description, &fromJSON))
			assert.Equal(t, normalise(t, fromYAML), normalise(t, fromJSON), "JSON equivalent")
		})
	}
}

// normalise makes YAML- and JSON-decoded values comparable (numbers as float64).
func normalise(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

func TestAddIsIdempotentAndVersionsAreImmutable(t *testing.T) {
	c, _ := newCatalogClient(t)
	first := postYAML(t, c, minimal("idem", "1.0", ""))
	require.Equal(t, http.StatusCreated, first.StatusCode(), string(first.Body))
	assert.Equal(t, "1.0.0", first.JSON201.Version, "1.0 reads as 1.0.0")

	again := postYAML(t, c, minimal("idem", "1.0", ""))
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	assert.Equal(t, first.JSON201.Digest, again.JSON200.Digest)

	// The same content as JSON is the same version too.
	var doc any
	require.NoError(t, yaml.Unmarshal(minimal("idem", "1.0", ""), &doc))
	asJSON, _ := json.Marshal(doc)
	viaJSON, err := c.CreateApplicationVersionWithBodyWithResponse(t.Context(), nil, "application/json", bytes.NewReader(asJSON))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, viaJSON.StatusCode(), string(viaJSON.Body))

	// Other content under the same version (spelled 1.0.0 this time) is refused.
	changed := postYAML(t, c, minimal("idem", "1.0.0", ""))
	p := problemOf(t, changed.HTTPResponse, changed.Body, http.StatusConflict)
	assert.Equal(t, httpapi.ProblemBase+"version-exists", p.Type)

	// Both spellings name the version.
	for _, spelling := range []string{"1.0", "1.0.0", "1"} {
		one, err := c.GetApplicationVersionWithResponse(t.Context(), "idem", spelling, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, one.StatusCode(), spelling)
		assert.Equal(t, "1.0.0", one.JSON200.Version)
	}
}

func problemOf(t *testing.T, res *http.Response, body []byte, status int) problemBody {
	t.Helper()
	require.Equal(t, status, res.StatusCode, string(body))
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	var p problemBody
	require.NoError(t, json.Unmarshal(body, &p))
	assert.Equal(t, status, p.Status)
	assert.NotEmpty(t, p.RequestID)
	return p
}

func TestInvalidDescriptionListsEveryProblem(t *testing.T) {
	c, _ := newCatalogClient(t)
	body := []byte(`apiVersion: v1
id: Not_Valid
metadata:
  name: x
  version: latest
deploymentProfiles:
  - type: compose
    id: p
    components:
      - name: a
lifecycle:
  upgrade:
    minUpgradeFom: "1.0.0"
`)
	res := postYAML(t, c, body)
	p := problemOf(t, res.HTTPResponse, res.Body, http.StatusUnprocessableEntity)
	assert.Equal(t, httpapi.ProblemBase+"invalid-description", p.Type)
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
		assert.NotEmpty(t, e.Message)
	}
	assert.Contains(t, fields, "/id")
	assert.Contains(t, fields, "/metadata/version")
	assert.Contains(t, fields, "/lifecycle/upgrade/minUpgradeFom")

	list, err := c.ListApplicationsWithResponse(t.Context(), nil)
	require.NoError(t, err)
	assert.Empty(t, list.JSON200.Items, "a refused description changes nothing")
}

func TestHostileBodiesAreRefusedQuickly(t *testing.T) {
	c, _ := newCatalogClient(t)
	bomb := "a: &a [x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 9 {
		name := fmt.Sprintf("b%d", i)
		bomb += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	for name, tc := range map[string]struct {
		ct     string
		body   string
		status int
	}{
		"alias bomb":     {"application/yaml", bomb, 0},
		"deep yaml":      {"application/yaml", "a: " + deep, 0},
		"deep json":      {"application/json", `{"a":` + deep + `}`, 0},
		"oversized":      {"application/yaml", "a: " + strings.Repeat("x", 3<<20), http.StatusRequestEntityTooLarge},
		"not a mapping":  {"application/yaml", "- 1\n- 2\n", http.StatusBadRequest},
		"duplicate keys": {"application/yaml", "id: a\nid: b\n", http.StatusBadRequest},
		"garbage":        {"application/yaml", "\x00\x01\x02{{{", http.StatusBadRequest},
		"text/plain":     {"text/plain", "hello", http.StatusUnsupportedMediaType},
	} {
		t.Run(name, func(t *testing.T) {
			res, err := c.CreateApplicationVersionWithBodyWithResponse(t.Context(), nil, tc.ct, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.status != 0 {
				problemOf(t, res.HTTPResponse, res.Body, tc.status)
				return
			}
			assert.GreaterOrEqual(t, res.StatusCode(), 400, string(res.Body))
			assert.Less(t, res.StatusCode(), 500, string(res.Body))
			assert.Equal(t, "application/problem+json", res.HTTPResponse.Header.Get("Content-Type"))
		})
	}
}

func TestVersionsInSemVerOrderWithPages(t *testing.T) {
	c, _ := newCatalogClient(t)
	for _, v := range []string{"1.10.0", "1.2.0", "1.0.0-rc.1", "1.0.0", "1.0.0-rc.2", "0.9"} {
		res := postYAML(t, c, minimal("ordered", v, ""))
		require.Equal(t, http.StatusCreated, res.StatusCode(), string(res.Body))
	}
	want := []string{"0.9.0", "1.0.0-rc.1", "1.0.0-rc.2", "1.0.0", "1.2.0", "1.10.0"}
	var got []string
	var cursor *string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "pagination must end")
		limit := 4
		res, err := c.ListApplicationVersionsWithResponse(t.Context(), "ordered", &sdk.ListApplicationVersionsParams{Limit: &limit, Cursor: cursor})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		for _, v := range res.JSON200.Items {
			got = append(got, v.Version)
			assert.Nil(t, v.Description, "lists carry no description")
			assert.Equal(t, []sdk.UpgradeStrategy{"recreate"}, v.Lifecycle.Strategies)
			assert.False(t, v.Lifecycle.Rollback.Allowed, "rollback is forbidden by default")
		}
		if res.JSON200.NextCursor == nil {
			break
		}
		cursor = res.JSON200.NextCursor
	}
	assert.Equal(t, want, got)

	app, err := c.GetApplicationWithResponse(t.Context(), "ordered")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, app.StatusCode())
	assert.Equal(t, "1.10.0", app.JSON200.LatestVersion)
	assert.Equal(t, 6, app.JSON200.VersionCount)
}

func TestYankUnyankAndDelete(t *testing.T) {
	c, _ := newCatalogClient(t)
	for _, v := range []string{"1.0.0", "2.0.0"} {
		require.Equal(t, http.StatusCreated, postYAML(t, c, minimal("yanky", v, "")).StatusCode())
	}
	reason := "CVE-2026-0001"
	y, err := c.YankApplicationVersionWithResponse(t.Context(), "yanky", "2.0", nil, sdk.YankRequest{Reason: &reason})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, y.StatusCode(), string(y.Body))
	assert.True(t, y.JSON200.Yanked)
	assert.Equal(t, reason, *y.JSON200.YankedReason)
	require.NotNil(t, y.JSON200.YankedAt)

	app, err := c.GetApplicationWithResponse(t.Context(), "yanky")
	require.NoError(t, err)
	assert.Equal(t, "1.0.0", app.JSON200.LatestVersion, "a yanked version is not the latest")

	u, err := c.UnyankApplicationVersionWithResponse(t.Context(), "yanky", "2.0.0", nil)
	require.NoError(t, nil, err)
	require.Equal(t, http.StatusOK, u.StatusCode())
	assert.False(t, u.JSON200.Yanked)
	assert.Nil(t, u.JSON200.YankedAt)

	d, err := c.DeleteApplicationVersionWithResponse(t.Context(), "yanky", "1.0.0")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, d.StatusCode())
	d, err = c.DeleteApplicationVersionWithResponse(t.Context(), "yanky", "1.0.0")
	require.NoError(t, err)
	problemOf(t, d.HTTPResponse, d.Body, http.StatusNotFound)

	d, err = c.DeleteApplicationVersionWithResponse(t.Context(), "yanky", "2.0.0")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, d.StatusCode())
	app, err = c.GetApplicationWithResponse(t.Context(), "yanky")
	require.NoError(t, err)
	problemOf(t, app.HTTPResponse, app.Body, http.StatusNotFound)
}

func TestConditionalAndNegotiatedGet(t *testing.T) {
	c, base := newCatalogClient(t)
	require.Equal(t, http.StatusCreated, postYAML(t, c, minimal("cond", "1.0.0", "")).StatusCode())
	path := base + "/mgmt/v1/applications/cond/versions/1.0.0"

	get := func(accept, inm string) *http.Response {
		req, _ := http.NewRequest("GET", path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if inm != "" {
			req.Header.Set("If-None-Match", inm)
		}
		res, err := adminHTTP.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { res.Body.Close() })
		return res
	}
	jsonRes := get("", "")
	require.Equal(t, http.StatusOK, jsonRes.StatusCode)
	jsonTag := jsonRes.Header.Get("ETag")
	yamlRes := get("application/yaml", "")
	yamlTag := yamlRes.Header.Get("ETag")
	assert.NotEqual(t, jsonTag, yamlTag, "each representation has its own tag")

	assert.Equal(t, http.StatusNotModified, get("", jsonTag).StatusCode)
	assert.Equal(t, http.StatusNotModified, get("application/yaml", yamlTag).StatusCode)
	assert.Equal(t, http.StatusOK, get("application/yaml", jsonTag).StatusCode)

	// A yank changes the JSON representation, so its tag.
	_, err := c.YankApplicationVersionWithResponse(t.Context(), "cond", "1.0.0", nil, sdk.YankRequest{})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, get("", jsonTag).StatusCode)

	res := get("text/html", "")
	body, _ := io.ReadAll(res.Body)
	problemOf(t, res, body, http.StatusNotAcceptable)
}

func TestBadParametersAreProblems(t *testing.T) {
	_, base := newCatalogClient(t)
	for _, tc := range []struct {
		path   string
		status int
		field  string
	}{
		{"/mgmt/v1/applications?limit=0", http.StatusBadRequest, "query/limit"},
		{"/mgmt/v1/applications?limit=abc", http.StatusBadRequest, "query/limit"},
		{"/mgmt/v1/applications?limit=501", http.StatusBadRequest, "query/limit"},
		{"/mgmt/v1/applications?cursor=%21%21", http.StatusBadRequest, "query/cursor"},
		{"/mgmt/v1/applications?cursor=" + strings.Repeat("A", 600), http.StatusBadRequest, "query/cursor"},
		{"/mgmt/v1/applications/Not_An_Id", http.StatusBadRequest, "path/applicationId"},
		{"/mgmt/v1/applications/ok/versions/" + strings.Repeat("1", 200), http.StatusBadRequest, "path/version"},
		{"/mgmt/v1/applications/ok/versions/latest", http.StatusUnprocessableEntity, ""},
	} {
		t.Run(tc.path, func(t *testing.T) {
			res, err := adminHTTP.Get(base + tc.path)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			p := problemOf(t, res, body, tc.status)
			if tc.field != "" {
				require.NotEmpty(t, p.Errors, string(body))
				assert.Equal(t, tc.field, p.Errors[0].Field)
			}
		})
	}
}
