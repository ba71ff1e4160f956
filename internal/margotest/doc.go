// Package margotest checks HTTP exchanges of the device-facing API against
// Margo's own Workload Management API document (OpenAPI 3.1.0, rc.3), not
// against wfm's copy of it, so that tests prove wire compatibility.
//
//	chk := margotest.FromEnv(t)       // $MARGO_SPEC; nil (checks nothing) when unset
//	chk.Check(t, req, res, body)      // a response: status, headers, Content-Type, body, extra rules
//	chk.CheckRequest(t, req, reqBody) // a request a device sends (capabilities PUT, status POST)
//
// CI sets MARGO_SPEC=../shared/reference/margo/workload-management-api-1.0.0-rc.3.yaml;
// a relative path is read from the module root (the folder holding go.mod).
//
// # How we read rc.3
//
// Load applies these changes in memory, to the YAML tree, before kin-openapi
// sees the document. Nothing else in the document is changed; no rule is
// loosened except where an erratum says so.
//
// Erratum 1 (shared/reference/margo/README.md): UnsignedAppStateManifest.required
// lists "bundle.mediaType", "bundle.digest" and "bundle.url", which no JSON
// object can satisfy in the intended sense. The dotted entries are dropped and
// mediaType, digest and url are added to DeploymentBundleRef.required. That
// schema is type [object, 'null'], and JSON Schema's required constrains
// objects only, so a null bundle stays valid and a non-null one must have the
// three fields.
//
// Erratum 2: appDeploymentMetadata.required drops "annotations", which the
// schema does not define and the published pages do not have. Only
// CheckApplicationDeployment reads that schema: no operation refers to it.
//
// Erratum 3: the YAML endpoint (GET /api/v1/deployments/{deploymentId}/{digest},
// application/yaml, type: string) is validated as its raw text.
//
// Erratum 4: the bundle (application/vnd.margo.bundle.v1+tar+gzip, type: string,
// format: binary) is validated as raw bytes, and Check also requires a valid
// gzip-compressed tar holding one or more YAML mappings at its root.
//
// The README's fourth defect (the overall-state precedence text lists removing
// twice and omits removed) is prose: the schemas' state enum has removed, and
// there is nothing to rewrite.
//
// Servers are set aside: operations are matched by method and path alone.
//
// # Body decoders: kept out of kin-openapi's global registry
//
// openapi3filter.RegisterBodyDecoder is process-global, shared by every test of
// the package that imports this one. internal/httpapi registers its own
// raw-text application/yaml decoder there for its request validator, and
// kin-openapi's default parses YAML into a map; a registration from here would
// change what other code in the same test binary sees, and registering and
// restoring around each call would race with parallel tests. So this package
// registers nothing: openapi3filter.ValidateResponse and ValidateRequest are
// called with ExcludeResponseBody / ExcludeRequestBody (status, declared
// headers, parameters), and the body is read here, by a reader chosen per
// media type for this call only (JSON and +json with
// openapi3filter.JSONBodyDecoder, which is called directly, not looked up;
// application/yaml as text; format: binary as raw bytes), then validated with
// the schema's VisitJSON and the options openapi3filter itself uses
// (EnableJSONSchema2020 for 3.1 documents, VisitAsResponse or VisitAsRequest,
// MultiErrors). The checker's verdicts therefore do not depend on what any
// package registered, and it changes nothing for them.
//
// # OpenAPI 3.1 forms: read natively, with no rewrite into 3.0
//
// kin-openapi v0.153.0 loads 3.1 documents and, for them, validates with JSON
// Schema 2020-12 (santhosh-tekuri/jsonschema/v6) through
// openapi3.EnableJSONSchema2020. One subtlety: a schema that holds component
// $refs but no 2020-only keyword (UnsignedAppStateManifest,
// DeploymentStatusManifest) is validated by kin-openapi's own visitor instead,
// which also understands type arrays with 'null'. Messages show which engine
// spoke ("at /bundle: value must be one of object, null" from kin-openapi's
// visitor, "at '/x-acme-extensions': got number, want object" from the 2020-12
// engine). TestOpenAPI31Constructs and the operation tests pin each of these:
//
//   - type: [object, 'null'] (DeploymentBundleRef): null is accepted, a string refused.
//   - patternProperties beside additionalProperties: false (DeviceCapabilitiesManifest
//     and the appDeployment* schemas): x-<name>-extensions members are accepted when
//     they match the pattern's schema; other members are refused.
//   - type: number (ManifestVersion, sizeBytes, cores): a JSON Schema number, so 1.5
//     passes the schema; the integer range is an extra rule below.
//   - oneOf (label values), a $ref with a sibling description, items: {}, and the
//     mutualTLS security scheme (request checks pass a no-op authentication
//     function: mutual TLS belongs to the transport, not to the exchange).
//   - format (uri-reference, binary) is an annotation, as JSON Schema 2020-12 has it
//     by default: not asserted.
//
// # Routing
//
// Paths are matched here rather than with routers/gorillamux: a concrete
// segment wins over a template (GET /api/v1/deployments/x/status is the status
// path, whose only method is POST, and not a {digest}); a trailing path
// parameter whose schema pattern admits "/" spans segments (DeviceId: the
// ProblemDetail example instance /api/v1/capabilities/gateway-1/child-device-2),
// which gorillamux cannot match; and parameters are percent-decoded, which
// gorillamux leaves undone. A path or method the document does not declare is
// reported as "not a Margo operation".
//
// # What Check requires
//
//   - The status is declared for the operation (exactly, as NXX, or default).
//     kin-openapi allows undeclared statuses by default and skips 304 entirely;
//     here an undeclared status is a failure, 304 included (rc.3 declares 304
//     for the manifest and the bundle, not for the YAML endpoint).
//   - Declared headers (kin-openapi); none is marked required in rc.3.
//   - A response for which no content is declared (204, 304, 200/201 on PUT
//     capabilities and POST status) has an empty body.
//   - Otherwise Content-Type is declared, the body is one well-formed value of
//     that media type, and it matches the schema. A Content-Encoding of gzip is
//     undone first; another coding is reported as uncheckable.
//   - application/problem+json: "status", when present, equals the HTTP status
//     (RFC 9457 §3.1.3).
//
// Extra rules the schema cannot express, by operation:
//
//   - GET /api/v1/deployments 200: bundle is null when deployments is empty and
//     not null otherwise (README: null "when a client has no deployments"; an
//     empty archive is never served); manifestVersion is an integer in
//     [1, 2^64-1]; sizeBytes integers in [0, 2^64-1]; bundle.mediaType is
//     application/vnd.margo.bundle.v1+tar+gzip; every digest matches
//     ^sha256:[0-9a-f]{64}$; bundle.url is /api/v1/bundles/{bundle.digest};
//     deployments[].url is /api/v1/deployments/{deploymentId}/{digest} of the
//     same entry. The ETag is present and one strong entity-tag (quoted, no W/);
//     if its value is a sha256: digest it must be the digest of the bytes
//     served. Cache-Control, if any, is neither public nor immutable.
//   - GET /api/v1/deployments 304 and GET /api/v1/bundles/{digest} 304: a strong
//     ETag is present (RFC 9110 §15.4.5), for the bundle the quoted {digest}.
//   - GET /api/v1/deployments/{deploymentId}/{digest} and GET /api/v1/bundles/{digest}
//     200: the {digest} segment is a digest and equals the sha256 of the body;
//     Cache-Control has private, max-age=31536000 and immutable (rc.3's
//     documented value); an ETag, if any, is strong (for the bundle, the quoted
//     digest). The YAML body is UTF-8 text holding one YAML mapping. The bundle
//     is a gzip-compressed tar with at least one regular file, each at the root
//     and each a YAML mapping.
//   - POST /api/v1/deployments/{deploymentId}/status (CheckRequest):
//     adoptedManifestVersion is an integer in [1, 2^64-1].
package margotest
