package margotest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"
)

// DeploymentSchema is the component the document keeps for the
// ApplicationDeployment YAML a device downloads.
const DeploymentSchema = "appDeploymentManifest"

// CheckApplicationDeployment validates one ApplicationDeployment document
// (the YAML served by GET /api/v1/deployments/{deploymentId}/{digest} and
// packed in the bundle) against the document's appDeploymentManifest schema,
// erratum 2 applied. Check does not do this by itself: rc.3 declares that
// response as "type: string", and its own examples of older shapes would fail.
func (c *Checker) CheckApplicationDeployment(t testing.TB, doc []byte) {
	if c == nil {
		return
	}
	t.Helper()
	label := fmt.Sprintf("margo %s %s", c.version, DeploymentSchema)
	ref := c.doc.Components.Schemas[DeploymentSchema]
	if ref == nil || ref.Value == nil {
		t.Errorf("%s: the document has no such schema", label)
		return
	}
	value, err := yamlToJSON(doc)
	if err != nil {
		t.Errorf("%s: %v", label, err)
		return
	}
	opts := []openapi3.SchemaValidationOption{openapi3.MultiErrors()}
	if c.doc.IsOpenAPI31OrLater() {
		opts = append(opts, openapi3.EnableJSONSchema2020())
	}
	if err := ref.Value.VisitJSON(value, opts...); err != nil {
		t.Errorf("%s: the document doesn't match: %s", label, explain(err))
	}
}

// yamlToJSON reads one YAML document as the JSON value it denotes (numbers as
// json.Number, as kin-openapi's JSON body decoder gives them).
func yamlToJSON(doc []byte) (any, error) {
	if err := yamlMapping(doc); err != nil {
		return nil, fmt.Errorf("not a YAML mapping: %w", err)
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("the YAML has no JSON equivalent: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
