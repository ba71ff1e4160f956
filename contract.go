// Package wfm holds the files at the root of the repository that the binary
// embeds. The server's code lives in cmd/ and internal/.
package wfm

import "embed"

// OpenAPIYAML is openapi.yaml, the contract of both HTTP faces, byte for byte.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte

// Schemas holds the JSON Schemas (2020-12) of the lifecycle proposal
// (docs/sup/lifecycle.md), served byte for byte at /schemas/{name}:
// schemas/lifecycle.schema.json (the lifecycle section of an application
// description) and schemas/extension.schema.json (the device-facing
// x-wfm-extensions objects).
//
//go:embed schemas/*.schema.json
var Schemas embed.FS
