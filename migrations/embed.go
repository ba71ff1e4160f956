// Package migrations holds the goose SQL migrations of wfm, embedded into the
// binary so that the server migrates its own database at start.
package migrations

import "embed"

// FS holds every migration file (NNNNN_name.sql, goose format).
//
//go:embed *.sql
var FS embed.FS
