// Package sdk is the Go client of the wfm API, generated from openapi.yaml by
// oapi-codegen. Never edit sdk.gen.go by hand: run `make generate`.
//
//	c, err := sdk.NewClientWithResponses("http://localhost:8080")
//	res, err := c.GetReadyWithResponse(ctx)
package sdk
