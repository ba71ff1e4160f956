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
// bearer-token option (built on oapi-codegen's own securityprovider, with
// the token trimmed and an empty one refused) and the reading of an RFC 9457
// problem from any error response, whatever its generated type (no Go
// module reads problem details on the client side; the generated Problem
// type does the parsing).
package sdk
