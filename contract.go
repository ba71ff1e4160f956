// Package wfm holds the files at the root of the repository that the binary
// embeds. The server's code lives in cmd/ and internal/.
package wfm

import _ "embed"

// OpenAPIYAML is openapi.yaml, the contract of both HTTP faces, byte for byte.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte
