package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net/http"

	"github.com/wfm-dev/wfm"
	"github.com/wfm-dev/wfm/api"
	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// schemaMediaType is the media type of a JSON Schema document.
const schemaMediaType = "application/schema+json"

// schemaDocument writes a schema's exact bytes.
type schemaDocument struct {
	body []byte
	etag string
	// notModified: the request's If-None-Match names etag (304).
	notModified bool
}

func (d schemaDocument) VisitGetSchemaResponse(w http.ResponseWriter) error {
	h := w.Header()
	h.Set("ETag", d.etag)
	h.Set("Cache-Control", "no-cache")
	if d.notModified {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	h.Set("Content-Type", schemaMediaType)
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(d.body)
	return err
}

// GetSchema serves one of the JSON Schemas embedded from schemas/, byte for
// byte. Returns ENOTFOUND for a name that is not one of them and
// ENOTACCEPTABLE if Accept takes neither application/schema+json nor
// application/json.
func (s *Server) GetSchema(ctx context.Context, req api.GetSchemaRequestObject) (api.GetSchemaResponseObject, error) {
	if r := requestFrom(ctx); r != nil {
		if !acceptsOwnType(r.Header.Get("Accept"), schemaMediaType) {
			return nil, &lifecycle.Error{Code: lifecycle.ENOTACCEPTABLE, Type: "not-acceptable",
				Message: "The schemas are available as " + schemaMediaType + "."}
		}
	}
	body, err := fs.ReadFile(wfm.Schemas, "schemas/"+req.Name)
	if err != nil {
		return nil, &lifecycle.Error{Code: lifecycle.ENOTFOUND, Type: "not-found",
			Message: "There is no schema named " + req.Name + "; the schemas are lifecycle.schema.json and extension.schema.json."}
	}
	sum := sha256.Sum256(body)
	d := schemaDocument{body: body, etag: `"` + hex.EncodeToString(sum[:]) + `"`}
	if req.Params.IfNoneMatch != nil {
		d.notModified = etagMatches(*req.Params.IfNoneMatch, d.etag, weak)
	}
	return d, nil
}
