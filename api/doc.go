// Package api holds the code generated from openapi.yaml by oapi-codegen
// (models, chi server, strict server, embedded spec). Never edit api.gen.go by
// hand: change openapi.yaml and run `make generate`.
package api

//go:generate go tool oapi-codegen -config config.yaml ../openapi.yaml
