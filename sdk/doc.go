// Package sdk is the Go client of the wfm API, generated from openapi.yaml by
// oapi-codegen. Never edit sdk.gen.go by hand: run `make generate`.
//
//	c, err := sdk.NewClientWithResponses("http://localhost:8080", sdk.WithBearerToken(token))
//	res, err := c.GetDeploymentWithResponse(ctx, id)
//	if p := sdk.ProblemOf(res.HTTPResponse, res.Body); p != nil {
//		return p // an error: "404 not-found: …"; p.Name() == "not-found"
//	}
//
// helpers.go is written by hand, because the generator makes neither: the
// bearer-token option (the token trimmed, an empty one refused; written
// here rather than taken from oapi-codegen's securityprovider, whose module
// is the whole generator, a heavy dependency for a client) and the reading
// of an RFC 9457 problem from any error response, whatever its generated
// type (no Go module reads problem details on the client side; the
// generated Problem type does the parsing).
//
// The package is a module of its own (sdk/go.mod) that imports nothing of
// the server; sdk/README.md has a complete program.
package sdk
