package margo

import (
	"fmt"
	"mime"
	"strings"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Parsed is the result of ParseDescription.
type Parsed struct {
	// Description is the typed, validated description.
	Description *ApplicationDescription
	// JSON is the whole document as compact JSON, every member kept
	// (unknown and extension members included) in document order. It is
	// the JSON equivalent of the input: reading it back gives the same
	// Parsed. Suitable for storage as JSONB and for the JSON representation.
	JSON []byte
}

// Media types ParseDescription reads.
const (
	MediaTypeYAML = "application/yaml"
	MediaTypeJSON = "application/json"
)

// ParseDescription reads an application description from untrusted bytes.
//
// mediaType is a Content-Type value: "application/yaml" (also
// "application/x-yaml", "text/yaml", "text/x-yaml" and "+yaml" suffixes)
// reads raw as YAML; "application/json" (and "+json" suffixes) reads it
// strictly as JSON (RFC 8259), not as YAML. A charset parameter other than
// utf-8 is refused.
//
// Reading is bounded: at most MaxDescriptionSize bytes, MaxDepth levels of
// nesting, MaxNodes nodes and MaxExpandedText bytes of text, where every use
// of a YAML alias counts as a copy of what it names, so alias bombs fail
// fast and the JSON form stays small. The node and depth bounds stop a
// document while it is read: YAML is counted by a pass over its bytes
// before the parser builds it (see CheckDescriptionBounds), JSON token by
// token. Merge keys (<<), custom
// tags, !!binary, NaN and infinities are refused: they have no JSON
// equivalent.
//
// Returns EUNSUPPORTEDTYPE if mediaType is neither YAML nor JSON; ETOOLARGE
// (type "description-too-large") if raw exceeds MaxDescriptionSize, MaxNodes
// or MaxExpandedText; EMALFORMED (type "malformed-description") if raw is not exactly
// one YAML document or JSON value, its top level is not a mapping, a mapping
// repeats a key, or it nests deeper than MaxDepth (the message gives line and
// column where known); EINVALID (type "invalid-description") if the document
// breaks a rule of the Margo data model or of the lifecycle extension, with
// every problem listed in Fields (JSON pointers into the document, at most
// MaxProblems of them).
func ParseDescription(raw []byte, mediaType string) (*Parsed, error) {
	return parseDescription(raw, mediaType, false)
}

// ParseStoredDescription reads a description that was stored when it was
// published, as ParseDescription does, with one difference: a lifecycle
// duration outside its range (lifecycle.DurationRangeOf), which versions
// stored before the ranges were rules may hold, is not refused; the value
// used instead is read and the change listed in the description's
// Lifecycle.Substitutions, so that such a version keeps working and says so.
// Returns the errors of ParseDescription.
func ParseStoredDescription(raw []byte, mediaType string) (*Parsed, error) {
	return parseDescription(raw, mediaType, true)
}

func parseDescription(raw []byte, mediaType string, stored bool) (*Parsed, error) {
	asJSON, err := readsJSON(mediaType)
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxDescriptionSize {
		return nil, &lifecycle.Error{Code: lifecycle.ETOOLARGE, Type: ProblemTooLarge,
			Message: fmt.Sprintf("the application description is %d bytes; at most %d are accepted", len(raw), MaxDescriptionSize)}
	}
	var doc *object
	if asJSON {
		doc, err = readJSON(raw)
	} else {
		doc, err = readYAML(raw)
	}
	if err != nil {
		return nil, err
	}
	d, problems := validate(doc, stored)
	if len(problems) > 0 {
		return nil, invalid(problems)
	}
	return &Parsed{Description: d, JSON: appendJSON(nil, doc)}, nil
}

func invalid(problems []lifecycle.FieldError) *lifecycle.Error {
	msg := fmt.Sprintf("the application description has %d problem(s)", len(problems))
	if len(problems) > MaxProblems {
		msg += fmt.Sprintf("; the first %d are listed", MaxProblems)
		problems = problems[:MaxProblems]
	}
	return &lifecycle.Error{Code: lifecycle.EINVALID, Type: ProblemInvalid, Message: msg, Fields: problems}
}

// readsJSON reports whether mediaType declares JSON (true) or YAML (false).
func readsJSON(mediaType string) (bool, error) {
	mt, params, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return false, &lifecycle.Error{Code: lifecycle.EUNSUPPORTEDTYPE, Type: ProblemUnsupported,
			Message: fmt.Sprintf("media type %q is not valid; want %s or %s", mediaType, MediaTypeYAML, MediaTypeJSON)}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false, &lifecycle.Error{Code: lifecycle.EUNSUPPORTEDTYPE, Type: ProblemUnsupported,
			Message: fmt.Sprintf("charset %q is not supported; application descriptions are UTF-8", cs)}
	}
	switch {
	case mt == MediaTypeJSON || strings.HasSuffix(mt, "+json"):
		return true, nil
	case mt == MediaTypeYAML || mt == "application/x-yaml" || mt == "text/yaml" || mt == "text/x-yaml" || strings.HasSuffix(mt, "+yaml"):
		return false, nil
	}
	return false, &lifecycle.Error{Code: lifecycle.EUNSUPPORTEDTYPE, Type: ProblemUnsupported,
		Message: fmt.Sprintf("media type %q is not supported; want %s or %s", mt, MediaTypeYAML, MediaTypeJSON)}
}
