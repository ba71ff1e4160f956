// Package page holds the one way lists are paged: a bounded limit and an
// opaque cursor that encodes the sort key of the last item of a page.
package page

import (
	"encoding/base64"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Bounds of a page.
const (
	DefaultLimit = 100
	MaxLimit     = 500
	maxKey       = 1024
)

// Args checks a requested limit (0 means DefaultLimit) and decodes a cursor
// into the sort key it carries ("" for the first page).
//
// Returns EINVALID (type "invalid-request", field query/limit or
// query/cursor) for a limit outside 1..MaxLimit or a cursor this server did
// not issue.
func Args(limit int, cursor string) (int, string, error) {
	switch {
	case limit == 0:
		limit = DefaultLimit
	case limit < 0 || limit > MaxLimit:
		return 0, "", &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "limit must be between 1 and 500.",
			Fields: []lifecycle.FieldError{{Pointer: "query/limit", Detail: "must be between 1 and 500"}}}
	}
	key, err := Decode(cursor)
	if err != nil {
		return 0, "", err
	}
	return limit, key, nil
}

// Encode turns a sort key into an opaque cursor.
func Encode(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// Decode turns a cursor back into its sort key.
//
// Returns EINVALID (field query/cursor) if c is not a cursor Encode made.
func Decode(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) > maxKey {
		return "", BadCursor()
	}
	return string(b), nil
}

// BadCursor is the error for a cursor whose key does not parse.
func BadCursor() error {
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request", Message: "The cursor is not one this server issued.",
		Fields: []lifecycle.FieldError{{Pointer: "query/cursor", Detail: "not a cursor from a previous page"}}}
}

// Trim cuts items fetched with limit+1 down to one page and returns the
// cursor of the next page ("" when there is none); key gives an item's sort
// key.
func Trim[T any](items []T, limit int, key func(T) string) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, Encode(key(items[limit-1]))
}
