package margotest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPI31Constructs pins what kin-openapi does with the OpenAPI 3.1
// forms rc.3 uses, read with no rewrite into 3.0 (see the package
// documentation). A kin-openapi upgrade that changes any of it fails here.
func TestOpenAPI31Constructs(t *testing.T) {
	c := load(t)
	visit := func(schema, value string) error {
		t.Helper()
		ref := c.doc.Components.Schemas[schema]
		if ref == nil {
			t.Fatalf("no schema %s", schema)
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(value)))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		return ref.Value.VisitJSON(v, openapi3.MultiErrors(), openapi3.EnableJSONSchema2020())
	}
	const caps = `{"properties":{"id":"d","vendor":"v","modelNumber":"m","serialNumber":"s"}`
	for _, tc := range []struct {
		schema, value string
		ok            bool
		why           string
	}{
		{"DeploymentBundleRef", `null`, true, "type: [object, 'null'] admits null"},
		{"DeploymentBundleRef", `"x"`, false, "type: [object, 'null'] refuses a string"},
		{"DeploymentBundleRef", `{}`, false, "erratum 1: a non-null bundle has mediaType, digest, url"},
		{"DeploymentBundleRef", `{"mediaType":"m","digest":"d","url":"u"}`, true, "the three fields satisfy it"},
		{"ManifestVersion", `1.5`, true, "type: number admits 1.5: integrality is the checker's own rule"},
		{"ManifestVersion", `0`, true, "no minimum in the schema: >= 1 is the checker's own rule"},
		{"ManifestVersion", `"1"`, false, "type: number refuses a string"},
		{"DeviceCapabilitiesManifest", caps + `}`, true, "identity fields suffice"},
		{"DeviceCapabilitiesManifest", caps + `,"x-acme-extensions":{"k":1}}`, true, "patternProperties admits x-<name>-extensions"},
		{"DeviceCapabilitiesManifest", caps + `,"x-acme-extensions":[]}`, false, "patternProperties' schema (object) applies"},
		{"DeviceCapabilitiesManifest", caps + `,"x-acme":{}}`, false, "additionalProperties: false beside patternProperties"},
		{"DeviceCapabilitiesManifest", caps + `,"labels":{"a":[1,2]}}`, true, "oneOf: array of numbers"},
		{"DeviceCapabilitiesManifest", caps + `,"labels":{"a":[1,"b"]}}`, false, "oneOf: a mixed array matches no branch"},
		{"DeploymentStatusManifest", `{"deploymentId":"d","adoptedManifestVersion":1,"status":{"state":"installed"},"components":[],"x":1}`, true, "status reports are open"},
	} {
		err := visit(tc.schema, tc.value)
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: err = %v; want ok=%v (%s)", tc.schema, tc.value, err, tc.ok, tc.why)
		}
	}
}
