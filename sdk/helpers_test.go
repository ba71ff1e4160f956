package sdk_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wfm-dev/wfm/sdk"
)

// TestProblemOfAnswersThatAreNotProblems: what a load balancer or proxy
// answers in wfm's place is read as RFC 9457 section 4.2.1 says (type
// about:blank, the status); wfm's own problems are tested against the
// server in internal/httpapi (TestSDKHelpers).
func TestProblemOfAnswersThatAreNotProblems(t *testing.T) {
	res := func(status int, contentType string) *http.Response {
		return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {contentType}}}
	}
	p := sdk.ProblemOf(res(502, "text/html"), []byte("<html>Bad gateway</html>"))
	require.NotNil(t, p)
	assert.Equal(t, "about:blank", p.Type)
	assert.Equal(t, "about:blank", p.Name())
	assert.Equal(t, 502, p.Status)
	assert.Equal(t, "Bad Gateway", p.Title)
	require.NotNil(t, p.Detail)
	assert.Equal(t, "<html>Bad gateway</html>", *p.Detail)
	assert.Equal(t, "502 about:blank: <html>Bad gateway</html>", p.Error())

	p = sdk.ProblemOf(res(503, "application/json"), []byte(`{"message":"down"}`))
	require.NotNil(t, p, "JSON that is not a problem")
	assert.Equal(t, "about:blank", p.Type)
	assert.Equal(t, 503, p.Status)

	p = sdk.ProblemOf(res(500, ""), nil)
	require.NotNil(t, p)
	assert.Nil(t, p.Detail)
	assert.Equal(t, "500 about:blank: Internal Server Error", p.Error())

	assert.Nil(t, sdk.ProblemOf(res(204, ""), nil))
	assert.Nil(t, sdk.ProblemOf(nil, nil))
}
