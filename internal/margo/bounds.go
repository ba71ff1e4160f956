package margo

import (
	"bytes"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// The checks of this file refuse, before anything is built from untrusted
// bytes, a document that the tree readers would refuse for its node count
// or its depth, with the error the reader would return. A YAML parser
// builds every node of a document before the tree reader counts them (a
// 1 MiB flat list is 500,000 yaml.Node values, hundreds of MiB), and the
// HTTP contract's validator decodes a JSON body whole into Go values: each
// check costs a pass over the bytes and allocates nothing per value.

// CheckDescriptionBounds reports, without building the document, whether raw
// is within the size, node and depth bounds ParseDescription applies, and
// returns the error ParseDescription would return for the first bound
// crossed (ETOOLARGE, type "description-too-large"; EMALFORMED, type
// "malformed-description", for JSON nested deeper than MaxDepth). nil does
// not mean that raw parses: syntax is left to ParseDescription, as is every
// media type other than YAML and JSON.
func CheckDescriptionBounds(raw []byte, mediaType string) error {
	asJSON, err := readsJSON(mediaType)
	if err != nil {
		return nil
	}
	if len(raw) > MaxDescriptionSize {
		return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemTooLarge,
			Message: fmt.Sprintf("the application description is %d bytes; at most %d are accepted", len(raw), MaxDescriptionSize)}
	}
	if asJSON {
		return checkJSON(raw, MaxDepth, MaxNodes, ProblemMalformed, ProblemTooLarge)
	}
	return checkYAML(raw)
}

// CheckCapabilitiesBounds is CheckDescriptionBounds for ParseCapabilities:
// it returns what ParseCapabilities would for more than MaxNodes values
// (ETOOLARGE, type "capabilities-too-large") or nesting deeper than
// MaxDeviceDepth (EMALFORMED, type "malformed-capabilities").
func CheckCapabilitiesBounds(raw []byte) error {
	return checkJSON(raw, MaxDeviceDepth, MaxNodes, ProblemMalformedCapabilities, ProblemCapabilitiesTooLarge)
}

// CheckStatusBounds is CheckCapabilitiesBounds for ParseStatusReport (types
// "status-too-large" and "malformed-status").
func CheckStatusBounds(raw []byte) error {
	return checkJSON(raw, MaxDeviceDepth, MaxNodes, ProblemMalformedStatus, ProblemStatusTooLarge)
}

// CheckJSONBounds reports whether the JSON text raw has at most maxNodes
// values and member names and nests at most MaxDepth levels. Returns
// ETOOLARGE or EMALFORMED (with the line and column of the value too deep)
// for the first bound crossed, their Type left empty for the caller to
// name; nil if raw is within them or is not JSON (the scan stops at the
// first syntax error, which the caller's parser explains).
func CheckJSONBounds(raw []byte, maxNodes int) error {
	return checkJSON(raw, MaxDepth, maxNodes, "", "")
}

// checkJSON counts as readJSON does: every value and every member name is a
// node, and a value inside maxDepth open arrays and objects is too deep.
// Device documents are refused beyond MaxDeviceDepth with the message
// readDeviceJSON gives.
func checkJSON(raw []byte, maxDepth, maxNodes int, malformedType, tooLargeType string) error {
	raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	nodes := 0
	for {
		// A value starts inside StackDepth open containers: readJSON's
		// depth of it is one more. A member name is not depth-checked.
		depth := dec.StackDepth()
		isName := false
		if depth > 0 {
			k, n := dec.StackIndex(depth)
			isName = k == '{' && n%2 == 0
		}
		tok, err := dec.ReadToken() // a string token is not copied until asked for
		if err != nil {
			return nil // the end, or a syntax error the parser explains
		}
		if k := tok.Kind(); k == ']' || k == '}' {
			continue
		}
		if !isName && depth >= maxDepth {
			if maxDepth == MaxDeviceDepth {
				return &lifecycle.Error{Code: lifecycle.EMALFORMED, Type: malformedType,
					Message: fmt.Sprintf("the document nests deeper than %d levels", MaxDeviceDepth)}
			}
			r := &jsonReader{raw: raw}
			e := tooDeep(r.whereAt(dec.InputOffset()))
			e.Type = malformedType
			return e
		}
		nodes++
		if nodes > maxNodes {
			if maxNodes != MaxNodes {
				return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: tooLargeType,
					Message: fmt.Sprintf("the document has more than %d values and member names", maxNodes)}
			}
			return tooManyNodes(tooLargeType)
		}
	}
}

func tooManyNodes(typ string) *lifecycle.Error {
	return &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: typ,
		Message: fmt.Sprintf("the document has more than %d nodes (counting each use of a YAML alias as a copy of what it names)", MaxNodes)}
}
