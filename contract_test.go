package wfm_test

import (
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm"
)

// TestContractIsValid loads openapi.yaml as the server does and validates it,
// examples included: dangling refs, bad types, bad examples and undeclared
// path parameters all fail here.
func TestContractIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(wfm.OpenAPIYAML)
	require.NoError(t, err)
	require.Equal(t, "3.0.3", doc.OpenAPI)
	require.NoError(t, doc.Validate(t.Context(), openapi3.EnableExamplesValidation()))

	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotEmpty(t, op.OperationID, "%s %s has no operationId", method, path)
			require.NotEmpty(t, op.Summary, "%s %s has no summary", method, path)
			require.NotNil(t, op.Responses.Default(), "%s %s has no default (problem) response", method, path)
		}
	}
}
