package margotest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
)

const manifestType = "application/vnd.margo.manifest.v1+json"

// exampleManifest is DesiredStateManifest-001.json with its shortened digests
// ("sha256:b5c6d7e8f9...") made full length, in the digest and url members alike.
func exampleManifest(t testing.TB) []byte {
	b := testdata(t, "DesiredStateManifest-001.json")
	b = bytes.ReplaceAll(b, []byte("b5c6d7e8f9..."), []byte("b5c6d7e8f9"+strings.Repeat("0", 54)))
	b = bytes.ReplaceAll(b, []byte("a4e01b2c3d..."), []byte("a4e01b2c3d"+strings.Repeat("1", 54)))
	return b
}

// checkManifest sends body as a 200 of GET /api/v1/deployments with the
// headers a conforming server gives it, changed by edit.
func checkManifestWith(c *Checker, body []byte, edit func(h map[string]string)) func(testing.TB) {
	return func(tb testing.TB) {
		h := map[string]string{
			"Content-Type":  manifestType,
			"ETag":          `"` + Digest(body) + `"`,
			"Cache-Control": "private",
		}
		if edit != nil {
			edit(h)
		}
		res, got := respond(http.StatusOK, h, body)
		c.Check(tb, get("/api/v1/deployments"), res, got)
	}
}

func TestLoadAppliesErrata(t *testing.T) {
	c := load(t)
	if c.Version() != "1.0.0-rc.3" {
		t.Errorf("info.version = %q, want 1.0.0-rc.3", c.Version())
	}
	if got := c.Errata(); len(got) != 2 {
		t.Fatalf("errata applied = %q, want erratum 1 and erratum 2", got)
	}
	for _, e := range c.Errata() {
		t.Log(e)
	}
	schemas := c.doc.Components.Schemas
	if req := schemas["UnsignedAppStateManifest"].Value.Required; !slices.Equal(req, []string{"manifestVersion", "bundle", "deployments"}) {
		t.Errorf("UnsignedAppStateManifest.required = %q", req)
	}
	if req := schemas["DeploymentBundleRef"].Value.Required; !slices.Equal(req, []string{"mediaType", "digest", "url"}) {
		t.Errorf("DeploymentBundleRef.required = %q", req)
	}
	if req := schemas["appDeploymentMetadata"].Value.Required; slices.Contains(req, "annotations") || len(req) != 3 {
		t.Errorf("appDeploymentMetadata.required = %q", req)
	}
	if c.doc.Servers != nil {
		t.Errorf("servers are kept: %v", c.doc.Servers)
	}

	// The raw document has the defects the errata are about.
	raw := loadRaw(t)
	if len(raw.Errata()) != 0 {
		t.Errorf("raw document has errata applied: %q", raw.Errata())
	}
	if req := raw.doc.Components.Schemas["UnsignedAppStateManifest"].Value.Required; !slices.Contains(req, "bundle.digest") {
		t.Errorf("raw UnsignedAppStateManifest.required = %q: the test no longer shows erratum 1", req)
	}
}

func TestManifest(t *testing.T) {
	c := load(t)
	good := exampleManifest(t)

	t.Run("example with full-length digests passes", func(t *testing.T) {
		passes(t, checkManifestWith(c, good, nil))
	})
	t.Run("no deployments, bundle null passes", func(t *testing.T) {
		passes(t, checkManifestWith(c, []byte(`{"manifestVersion":1,"bundle":null,"deployments":[]}`), nil))
	})
	t.Run("the raw rc.3 document rejects every manifest (erratum 1 is needed)", func(t *testing.T) {
		fails(t, checkManifestWith(loadRaw(t), good, nil), `"bundle.digest" is missing`)
	})
	t.Run("the example as printed (shortened digests) fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, testdata(t, "DesiredStateManifest-001.json"), nil),
			"bundle.digest", "sha256:<64 lowercase hex digits>")
	})

	cases := []struct {
		name  string
		from  string
		to    string
		wants []string
	}{
		{"bundle omitted", `"bundle": {`, `"omitted": {`, []string{"UnsignedAppStateManifest", `"bundle"`}},
		{"manifestVersion 0", `"manifestVersion": 101`, `"manifestVersion": 0`, []string{"manifestVersion 0 is below 1"}},
		{"manifestVersion not integral", `"manifestVersion": 101`, `"manifestVersion": 101.5`, []string{"manifestVersion 101.5 is not an integer"}},
		{"manifestVersion above uint64", `"manifestVersion": 101`, `"manifestVersion": 18446744073709551616`, []string{"above 2^64-1"}},
		{"manifestVersion a string", `"manifestVersion": 101`, `"manifestVersion": "101"`, []string{"manifestVersion"}},
		{"bundle without digest (erratum 1)", `"digest": "sha256:b5c6`, `"x-digest": "sha256:b5c6`, []string{"at /bundle/digest", `property "digest" is missing`}},
		{"bundle a string (type [object, 'null'])", `"bundle": {`, `"bundle": "none", "b": {`, []string{"bundle"}},
		{"bundle.mediaType wrong", `"mediaType": "application/vnd.margo.bundle.v1+tar+gzip"`, `"mediaType": "application/gzip"`, []string{"bundle.mediaType"}},
		{"bundle.url not the digest's", `"url": "/api/v1/bundles/sha256:b5c6`, `"url": "/bundles/sha256:b5c6`, []string{"bundle.url"}},
		{"deployment url not its digest", `/sha256:a4e01b2c3d`, `/sha256:a4e01b2c3e`, []string{"deployments[0].url"}},
		{"deployment digest upper case", `"digest": "sha256:a4e01b2c3d`, `"digest": "sha256:A4E01B2C3D`, []string{"deployments[0].digest"}},
		{"deployment without url", `"url": "/api/v1/deployments/`, `"link": "/api/v1/deployments/`, []string{"url"}},
		{"sizeBytes negative", `"mediaType"`, `"sizeBytes": -1, "mediaType"`, []string{"bundle.sizeBytes -1 is below 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name+" fails", func(t *testing.T) {
			body := []byte(strings.Replace(string(good), tc.from, tc.to, 1))
			if bytes.Equal(body, good) {
				t.Fatalf("the edit %q → %q changed nothing", tc.from, tc.to)
			}
			fails(t, checkManifestWith(c, body, nil), tc.wants...)
		})
	}

	t.Run("bundle not null with no deployments fails", func(t *testing.T) {
		body := []byte(`{"manifestVersion":1,"bundle":{"mediaType":"application/vnd.margo.bundle.v1+tar+gzip","digest":"sha256:` +
			strings.Repeat("0", 64) + `","url":"/api/v1/bundles/sha256:` + strings.Repeat("0", 64) + `"},"deployments":[]}`)
		fails(t, checkManifestWith(c, body, nil), "bundle must be null when deployments is empty")
	})
	t.Run("bundle null with deployments fails", func(t *testing.T) {
		body := []byte(strings.Replace(string(good), `"bundle": {`, `"bundle": null, "x": {`, 1))
		fails(t, checkManifestWith(c, body, nil), "bundle is null but there are 1 deployments")
	})
	t.Run("trailing bytes after the JSON fail", func(t *testing.T) {
		fails(t, checkManifestWith(c, append(slices.Clone(good), "{}"...), nil), "not one well-formed JSON value")
	})
	t.Run("Content-Type application/json fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { h["Content-Type"] = "application/json" }),
			`Content-Type "application/json" is not declared`)
	})
	t.Run("no ETag fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { delete(h, "ETag") }), "ETag is missing")
	})
	t.Run("weak ETag fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { h["ETag"] = `W/"` + Digest(good) + `"` }), "strong")
	})
	t.Run("unquoted ETag fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { h["ETag"] = Digest(good) }), "strong")
	})
	t.Run("ETag digest of other bytes fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { h["ETag"] = `"` + Digest(nil) + `"` }),
			"not the digest of the manifest bytes served")
	})
	t.Run("opaque strong ETag passes", func(t *testing.T) {
		passes(t, checkManifestWith(c, good, func(h map[string]string) { h["ETag"] = `"m-101"` }))
	})
	t.Run("immutable manifest fails", func(t *testing.T) {
		fails(t, checkManifestWith(c, good, func(h map[string]string) { h["Cache-Control"] = "private, immutable" }), "immutable")
	})
	t.Run("304 without body passes", func(t *testing.T) {
		passes(t, func(tb testing.TB) {
			req := get("/api/v1/deployments")
			req.Header.Set("If-None-Match", `"`+Digest(good)+`"`)
			res, body := respond(http.StatusNotModified, map[string]string{"ETag": `"` + Digest(good) + `"`}, nil)
			c.Check(tb, req, res, body)
		})
	})
	t.Run("304 with a body fails", func(t *testing.T) {
		fails(t, func(tb testing.TB) {
			res, _ := respond(http.StatusNotModified, map[string]string{"ETag": `"` + Digest(good) + `"`}, nil)
			c.Check(tb, get("/api/v1/deployments"), res, good)
		}, "→ 304", "declares no content", "body bytes were sent")
	})
	t.Run("304 without ETag fails", func(t *testing.T) {
		fails(t, func(tb testing.TB) {
			res, body := respond(http.StatusNotModified, nil, nil)
			c.Check(tb, get("/api/v1/deployments"), res, body)
		}, "304 must carry the ETag")
	})
}

func TestUndeclaredStatus(t *testing.T) {
	c := load(t)
	problem := []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}`)
	fails(t, func(tb testing.TB) {
		res, body := respond(http.StatusInternalServerError, map[string]string{"Content-Type": "application/problem+json"}, problem)
		c.Check(tb, get("/api/v1/deployments"), res, body)
	}, "GET /api/v1/deployments → 500", "status 500 is not declared", "200, 304, 403, 406")

	// rc.3 declares no 304 for the YAML endpoint.
	fails(t, func(tb testing.TB) {
		res, body := respond(http.StatusNotModified, map[string]string{"ETag": `"x"`}, nil)
		c.Check(tb, get("/api/v1/deployments/a/sha256:"+strings.Repeat("0", 64)), res, body)
	}, "status 304 is not declared")
}

func TestProblemResponses(t *testing.T) {
	c := load(t)
	send := func(status int, ct string, body string) func(testing.TB) {
		return func(tb testing.TB) {
			res, b := respond(status, map[string]string{"Content-Type": ct}, []byte(body))
			c.Check(tb, get("/api/v1/bundles/sha256:"+strings.Repeat("0", 64)), res, b)
		}
	}
	t.Run("404 problem passes", func(t *testing.T) {
		passes(t, send(404, "application/problem+json",
			`{"type":"https://docs.margo.org/specification/problem-types#not-found","title":"Not found","status":404,"vendor_x":1}`))
	})
	t.Run("404 problem without status fails", func(t *testing.T) {
		fails(t, send(404, "application/problem+json", `{"type":"about:blank","title":"Not found"}`),
			"→ 404", "ProblemDetail", "missing property 'status'")
	})
	t.Run("problem status other than the HTTP status fails", func(t *testing.T) {
		fails(t, send(404, "application/problem+json", `{"type":"about:blank","title":"x","status":400}`), "RFC 9457")
	})
	t.Run("404 as application/json fails", func(t *testing.T) {
		fails(t, send(404, "application/json", `{"type":"about:blank","title":"x","status":404}`), "not declared")
	})
	t.Run("403 problem passes on DELETE capabilities", func(t *testing.T) {
		passes(t, func(tb testing.TB) {
			res, b := respond(403, map[string]string{"Content-Type": "application/problem+json; charset=utf-8"},
				[]byte(`{"type":"about:blank","title":"Forbidden","status":403}`))
			c.Check(tb, httptest.NewRequest(http.MethodDelete, "/api/v1/capabilities/dev-1", nil), res, b)
		})
	})
	t.Run("204 on DELETE capabilities passes, with a body fails", func(t *testing.T) {
		req := httptest.NewRequest(http.MethodDelete, "/api/v1/capabilities/gateway-1/child-2", nil)
		passes(t, func(tb testing.TB) {
			res, b := respond(204, nil, nil)
			c.Check(tb, req, res, b)
		})
		fails(t, func(tb testing.TB) {
			res, _ := respond(204, nil, nil)
			c.Check(tb, req, res, []byte("{}"))
		}, "→ 204", "declares no content")
	})
}

func TestNotMargoOperations(t *testing.T) {
	c := load(t)
	res, body := respond(200, nil, nil)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/api/v1/nothing", "no path of the document matches"},
		{"GET", "/api/v1/deployments/", "no path"},
		{"GET", "/healthz", "no path"},
		{"GET", "/api/v1/capabilities/dev-1", "declares only DELETE, PUT"},
		{"HEAD", "/api/v1/deployments", "declares only GET"},
		// A concrete path wins over a template: .../status is not a {digest}.
		{"GET", "/api/v1/deployments/abc/status", "declares only POST"},
		{"POST", "/api/v1/deployments/abc/sha256:00", "declares only GET"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			fails(t, func(tb testing.TB) {
				c.Check(tb, httptest.NewRequest(tc.method, tc.path, nil), res, body)
			}, "not a Margo operation", tc.want)
		})
	}
}

func TestStatusRequest(t *testing.T) {
	c := load(t)
	example := testdata(t, "DeploymentStatus-001.json")
	post := func(path, ct string, body []byte) func(testing.TB) {
		return func(tb testing.TB) {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			c.CheckRequest(tb, req, body)
			// The caller's body is not consumed.
			if n, _ := req.Body.Read(make([]byte, 1)); n != 1 && len(body) > 0 {
				tb.Errorf("CheckRequest consumed the request body")
			}
		}
	}
	path := "/api/v1/deployments/a3e2f5dc-912e-494f-8395-52cf3769bc06/status"
	edit := func(from, to string) []byte {
		b := []byte(strings.Replace(string(example), from, to, 1))
		if bytes.Equal(b, example) {
			t.Fatalf("edit %q changed nothing", from)
		}
		return b
	}

	t.Run("example passes", func(t *testing.T) { passes(t, post(path, "application/json", example)) })
	t.Run("extension member passes (the schema is open)", func(t *testing.T) {
		passes(t, post(path, "application/json", edit(`"deviceId"`, `"x-acme-note": "hi", "deviceId"`)))
	})
	t.Run("removed state passes", func(t *testing.T) {
		passes(t, post(path, "application/json", edit(`"state": "pending"`, `"state": "removed"`)))
	})
	t.Run("without components fails", func(t *testing.T) {
		fails(t, post(path, "application/json", edit(`"components"`, `"parts"`)), "request", "DeploymentStatusManifest", "components")
	})
	t.Run("unknown state fails", func(t *testing.T) {
		fails(t, post(path, "application/json", edit(`"state": "pending"`, `"state": "done"`)), "state")
	})
	t.Run("adoptedManifestVersion 0 fails", func(t *testing.T) {
		fails(t, post(path, "application/json", edit(`"adoptedManifestVersion": 7`, `"adoptedManifestVersion": 0`)), "adoptedManifestVersion 0 is below 1")
	})
	t.Run("adoptedManifestVersion 7.5 fails", func(t *testing.T) {
		fails(t, post(path, "application/json", edit(`"adoptedManifestVersion": 7`, `"adoptedManifestVersion": 7.5`)), "not an integer")
	})
	t.Run("bad deviceId fails", func(t *testing.T) {
		fails(t, post(path, "application/json", edit(`"plant-alfa-zone1-edge01"`, `"plant alfa"`)), "deviceId")
	})
	t.Run("text/plain fails", func(t *testing.T) {
		fails(t, post(path, "text/plain", example), `Content-Type "text/plain" is not declared`)
	})
	t.Run("no body fails", func(t *testing.T) {
		fails(t, post(path, "application/json", nil), "request body is required")
	})
	t.Run("201 and 200 responses pass", func(t *testing.T) {
		for _, status := range []int{200, 201} {
			passes(t, func(tb testing.TB) {
				res, b := respond(status, nil, nil)
				c.Check(tb, httptest.NewRequest(http.MethodPost, path, nil), res, b)
			})
		}
	})
}

func TestCapabilitiesRequest(t *testing.T) {
	c := load(t)
	const good = `{"properties":{"id":"gateway-1/edge-1","vendor":"Acme","modelNumber":"M1","serialNumber":"S1",` +
		`"cpus":[{"cores":4,"architecture":"arm64"}],"memory":"8Gi","storage":"64Gi","otelCollector":true,` +
		`"supportedRuntimes":["oci"],"supportedDeploymentTypes":["compose"]},"labels":{"site":"a","floor":3,"zones":["x","y"]}}`
	put := func(path, body string) func(testing.TB) {
		return func(tb testing.TB) {
			req := httptest.NewRequest(http.MethodPut, path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			c.CheckRequest(tb, req, []byte(body))
		}
	}
	t.Run("child device (deviceId spans segments) passes", func(t *testing.T) {
		passes(t, put("/api/v1/capabilities/gateway-1/edge-1", good))
	})
	t.Run("vendor extension member passes (patternProperties)", func(t *testing.T) {
		passes(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"labels"`, `"x-acme-extensions":{"a":1},"labels"`, 1)))
	})
	t.Run("unknown top-level member fails (additionalProperties: false)", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"labels"`, `"extra":true,"labels"`, 1)),
			"PUT /api/v1/capabilities/{deviceId} request", "DeviceCapabilitiesManifest", "additional properties 'extra' not allowed")
	})
	t.Run("non-object vendor extension fails (patternProperties schema)", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"labels"`, `"x-acme-extensions":1,"labels"`, 1)),
			"'/x-acme-extensions': got number, want object")
	})
	t.Run("extension name off the pattern fails", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"labels"`, `"x-Acme-extensions":{},"labels"`, 1)),
			"additional properties 'x-Acme-extensions' not allowed")
	})
	t.Run("label object value fails", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"site":"a"`, `"site":{"a":1}`, 1)), "'/labels/site'")
	})
	t.Run("missing serialNumber fails", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev-1", strings.Replace(good, `"serialNumber":"S1",`, ``, 1)), "missing property 'serialNumber'")
	})
	t.Run("deviceId off its pattern fails", func(t *testing.T) {
		fails(t, put("/api/v1/capabilities/dev%201", good), `parameter "deviceId" in path`, "'dev 1' does not match pattern")
	})
}

func TestDeploymentYAML(t *testing.T) {
	c := load(t)
	doc := testdata(t, "ApplicationDeployment-001-helm.yaml")
	id := "a3e2f5dc-912e-494f-8395-52cf3769bc06"
	headers := func() map[string]string {
		return map[string]string{
			"Content-Type":  "application/yaml",
			"Cache-Control": "private, max-age=31536000, immutable",
			"ETag":          `"` + Digest(doc) + `"`,
			"Vary":          "Accept-Encoding",
		}
	}
	send := func(digest string, h map[string]string, body []byte) func(testing.TB) {
		return func(tb testing.TB) {
			res, b := respond(http.StatusOK, h, body)
			c.Check(tb, get("/api/v1/deployments/"+id+"/"+digest), res, b)
		}
	}
	t.Run("example whose digest matches the path passes", func(t *testing.T) {
		passes(t, send(Digest(doc), headers(), doc))
	})
	t.Run("older-shape example passes too (the body is type: string)", func(t *testing.T) {
		old := testdata(t, "ApplicationDeployment-002-gateway_directed_compose.yaml")
		passes(t, send(Digest(old), headers(), old))
	})
	t.Run("digest not matching the path fails", func(t *testing.T) {
		other := append(slices.Clone(doc), '\n')
		fails(t, send(Digest(other), headers(), doc), "→ 200", "not the", "{digest} path segment")
	})
	t.Run("malformed path digest fails", func(t *testing.T) {
		fails(t, send("sha256:abc", headers(), doc), "{digest} path segment", "not a digest")
	})
	t.Run("no immutable fails", func(t *testing.T) {
		h := headers()
		h["Cache-Control"] = "private, max-age=31536000"
		fails(t, send(Digest(doc), h, doc), `lacks "immutable"`)
	})
	t.Run("JSON content type fails", func(t *testing.T) {
		h := headers()
		h["Content-Type"] = "application/json"
		fails(t, send(Digest(doc), h, doc), "not declared")
	})
	t.Run("not a YAML mapping fails", func(t *testing.T) {
		body := []byte("- a\n- b\n")
		fails(t, send(Digest(body), headers(), body), "not an ApplicationDeployment YAML document")
	})
	t.Run("gzip content coding is read before hashing", func(t *testing.T) {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(doc)
		_ = zw.Close()
		h := headers()
		h["Content-Encoding"] = "gzip"
		passes(t, send(Digest(doc), h, z.Bytes()))
	})
}

func TestApplicationDeploymentSchema(t *testing.T) {
	c := load(t)
	helm := testdata(t, "ApplicationDeployment-001-helm.yaml")
	passes(t, func(tb testing.TB) { c.CheckApplicationDeployment(tb, helm) })
	// Without erratum 2 the published example fails for want of "annotations".
	fails(t, func(tb testing.TB) { loadRaw(t).CheckApplicationDeployment(tb, helm) }, "missing property 'annotations'")
	// The older compose shape (packageLocation) is not rc.3's component shape.
	old := testdata(t, "ApplicationDeployment-002-gateway_directed_compose.yaml")
	fails(t, func(tb testing.TB) { c.CheckApplicationDeployment(tb, old) }, "appDeploymentManifest", "missing properties 'repository', 'revision'")
}

func tarGz(t testing.TB, files map[string][]byte, dirs ...string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[n]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBundle(t *testing.T) {
	c := load(t)
	bundle := tarGz(t, map[string][]byte{
		"a3e2f5dc-912e-494f-8395-52cf3769bc06.yaml": testdata(t, "ApplicationDeployment-001-helm.yaml"),
		"ad9b614e-8912-45f4-a523-372358765def.yaml": testdata(t, "ApplicationDeployment-002-gateway_directed_compose.yaml"),
	})
	send := func(digest string, edit func(map[string]string), body []byte) func(testing.TB) {
		return func(tb testing.TB) {
			h := map[string]string{
				"Content-Type":  BundleMediaType,
				"Cache-Control": "private, max-age=31536000, immutable",
				"ETag":          `"` + digest + `"`,
			}
			if edit != nil {
				edit(h)
			}
			res, b := respond(http.StatusOK, h, body)
			c.Check(tb, get("/api/v1/bundles/"+digest), res, b)
		}
	}
	t.Run("bundle passes", func(t *testing.T) { passes(t, send(Digest(bundle), nil, bundle)) })
	t.Run("bundle with a ./ root entry passes", func(t *testing.T) {
		b := tarGz(t, map[string][]byte{"./x.yaml": []byte("id: x\n")}, "./")
		passes(t, send(Digest(b), nil, b))
	})
	t.Run("digest mismatch fails", func(t *testing.T) {
		fails(t, send("sha256:"+strings.Repeat("0", 64), nil, bundle), "{digest} path segment")
	})
	t.Run("ETag not the digest fails", func(t *testing.T) {
		fails(t, send(Digest(bundle), func(h map[string]string) { h["ETag"] = `"abc"` }, bundle), "not the quoted digest")
	})
	t.Run("not gzip fails", func(t *testing.T) {
		b := []byte("plain bytes")
		fails(t, send(Digest(b), nil, b), "not gzip-compressed")
	})
	t.Run("gzip but not tar fails", func(t *testing.T) {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(bytes.Repeat([]byte("not a tar header "), 64))
		_ = zw.Close()
		fails(t, send(Digest(z.Bytes()), nil, z.Bytes()), "not a valid gzip-compressed tar")
	})
	t.Run("empty archive fails", func(t *testing.T) {
		b := tarGz(t, nil)
		fails(t, send(Digest(b), nil, b), "holds no file")
	})
	t.Run("nested file fails", func(t *testing.T) {
		b := tarGz(t, map[string][]byte{"deployments/x.yaml": []byte("id: x\n")})
		fails(t, send(Digest(b), nil, b), "not at the archive's root")
	})
	t.Run("no immutable fails", func(t *testing.T) {
		fails(t, send(Digest(bundle), func(h map[string]string) { h["Cache-Control"] = "no-cache" }, bundle), `lacks "immutable"`)
	})
	t.Run("304 with the quoted digest passes", func(t *testing.T) {
		passes(t, func(tb testing.TB) {
			res, b := respond(http.StatusNotModified, map[string]string{"ETag": `"` + Digest(bundle) + `"`}, nil)
			c.Check(tb, get("/api/v1/bundles/"+Digest(bundle)), res, b)
		})
	})
}

func TestBundleProblems(t *testing.T) {
	good := tarGz(t, map[string][]byte{"a3e2f5dc-912e-494f-8395-52cf3769bc06.yaml": testdata(t, "ApplicationDeployment-001-helm.yaml")})
	if p := BundleProblems(good); len(p) != 0 {
		t.Errorf("BundleProblems(good bundle) = %q, want none", p)
	}
	for _, tt := range []struct {
		name, want string
		body       []byte
	}{
		{"nested", "not at the archive's root", tarGz(t, map[string][]byte{"deployments/x.yaml": []byte("id: x\n")})},
		{"empty", "holds no file", tarGz(t, nil)},
		{"not yaml", "not an ApplicationDeployment YAML document", tarGz(t, map[string][]byte{"x.yaml": []byte("- a list\n")})},
		{"not gzip", "not gzip-compressed", []byte("plain bytes")},
	} {
		p := BundleProblems(tt.body)
		if len(p) != 1 || !strings.Contains(p[0], tt.want) {
			t.Errorf("BundleProblems(%s) = %q, want one problem containing %q", tt.name, p, tt.want)
		}
	}
}

func TestNilChecker(t *testing.T) {
	var c *Checker
	passes(t, func(tb testing.TB) {
		res, b := respond(500, nil, []byte("anything"))
		c.Check(tb, get("/nowhere"), res, b)
		c.CheckRequest(tb, get("/nowhere"), nil)
		c.CheckApplicationDeployment(tb, []byte("x"))
	})
	if c.Enabled() || c.Errata() != nil || c.Version() != "" {
		t.Error("the nil checker claims to be on")
	}
}

func TestFromEnv(t *testing.T) {
	spec := specPath(t) // skips without the document
	t.Run("unset is off", func(t *testing.T) {
		t.Setenv(EnvVar, "")
		if c := FromEnv(t); c != nil {
			t.Errorf("FromEnv with %s unset = %v, want nil", EnvVar, c)
		}
	})
	t.Run("relative to the module root", func(t *testing.T) {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(root, spec)
		if err != nil {
			t.Skip(err)
		}
		t.Setenv(EnvVar, rel)
		c := FromEnv(t)
		if c == nil || c.Version() != "1.0.0-rc.3" {
			t.Fatalf("FromEnv(%s=%s) = %v", EnvVar, rel, c)
		}
		if again := FromEnv(t); again != c {
			t.Error("FromEnv loaded the document twice")
		}
	})
	t.Run("missing document is fatal", func(t *testing.T) {
		t.Setenv(EnvVar, "no/such/margo.yaml")
		f := run(t, func(tb testing.TB) { FromEnv(tb) })
		if len(f.fatals) != 1 || !strings.Contains(f.fatals[0], "no/such/margo.yaml") {
			t.Errorf("fatals = %q", f.fatals)
		}
	})
}

// TestRegistryUntouched: the checker reads YAML as text without changing
// kin-openapi's process-global body decoders, and its verdicts do not depend
// on what other packages registered there.
func TestRegistryUntouched(t *testing.T) {
	c := load(t)
	doc := testdata(t, "ApplicationDeployment-001-helm.yaml")
	before := map[string]uintptr{}
	for _, ct := range []string{"application/yaml", "application/x-yaml", "application/json", BundleMediaType, "*/*"} {
		before[ct] = decoderID(openapi3filter.RegisteredBodyDecoder(ct))
	}
	passes(t, func(tb testing.TB) {
		res, b := respond(200, map[string]string{
			"Content-Type": "application/yaml", "Cache-Control": "private, max-age=31536000, immutable",
		}, doc)
		c.Check(tb, get("/api/v1/deployments/x/"+Digest(doc)), res, b)
	})
	for ct, id := range before {
		if got := decoderID(openapi3filter.RegisteredBodyDecoder(ct)); got != id {
			t.Errorf("the body decoder for %s changed", ct)
		}
	}
	if before["application/yaml"] != decoderID(openapi3filter.YamlBodyDecoder) {
		t.Log("note: another package replaced kin-openapi's application/yaml decoder in this process")
	}
}

func decoderID(d openapi3filter.BodyDecoder) uintptr {
	if d == nil {
		return 0
	}
	return reflect.ValueOf(d).Pointer()
}

// TestConcurrentChecks: one Checker serves parallel tests (run with -race).
func TestConcurrentChecks(t *testing.T) {
	c := load(t)
	good := exampleManifest(t)
	status := testdata(t, "DeploymentStatus-001.json")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			passes(t, checkManifestWith(c, good, nil))
			passes(t, func(tb testing.TB) {
				req := httptest.NewRequest(http.MethodPost, "/api/v1/deployments/x/status", bytes.NewReader(status))
				req.Header.Set("Content-Type", "application/json")
				c.CheckRequest(tb, req, status)
			})
		}()
	}
	wg.Wait()
}
