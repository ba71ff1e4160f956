package httpapi

import (
	"strconv"
	"strings"

	"github.com/wfm-dev/wfm/internal/fleet"
)

// ETags and the conditional headers that carry them are HTTP's: the use
// cases in fleet see a deployment's generation and a fleet.Precondition,
// never a tag.

// comparison is how etagMatches compares entity-tags (RFC 9110 8.8.3.2).
type comparison bool

const (
	strong comparison = false // If-Match: weak tags never match
	weak   comparison = true  // If-None-Match: W/ prefixes ignored
)

// etagMatches reports whether a conditional header (If-Match or
// If-None-Match, RFC 9110 13.1.1 and 13.1.2) matches etag: it is "*" or
// lists a tag equal to etag under the comparison c. It is the only place
// that compares entity-tags.
func etagMatches(header, etag string, c comparison) bool {
	if strings.TrimSpace(header) == "*" {
		return true
	}
	opaque := func(t string) string { return strings.TrimPrefix(strings.TrimSpace(t), "W/") }
	for rest, more := header, true; more; {
		var t string
		t, rest, more = strings.Cut(rest, ",")
		t = strings.TrimSpace(t)
		if t == etag || c == weak && opaque(t) == opaque(etag) {
			return true
		}
	}
	return false
}

// deploymentETag is the strong validator of a deployment's representation,
// "d-<12 hex digits of its ID>-<generation>": it changes with every state
// change, revision and report.
func deploymentETag(id string, generation int64) string {
	return `"d-` + idPrefix(id) + "-" + strconv.FormatInt(generation, 10) + `"`
}

// idPrefix is the part of deployment id an ETag names. IDs are UUIDs,
// read back in lower case, and the store finds one given in upper case too:
// an ID from a URL is lowered so that it names the tag the deployment has.
// Anything shorter than a UUID (an ID that names no deployment) is used
// whole rather than cut.
func idPrefix(id string) string {
	p := strings.ToLower(strings.ReplaceAll(id, "-", ""))
	return p[:min(len(p), 12)]
}

// ifMatch translates the If-Match header of a change to deployment id into
// what the change expects of the deployment: nothing without the header,
// with an empty one or with "*"; otherwise that its generation is one of
// those the listed tags name, compared strongly (weak tags, tags of other
// deployments and malformed tags name none). A list that names no generation is a definite
// mismatch, refused as precondition-failed only where fleet checks the
// precondition (after not-found, validation and plan refusals; never in a
// dry run).
func ifMatch(header *string, id string) fleet.Precondition {
	return preconditionOf(header, id, deploymentETag)
}

// rolloutETag is the strong validator of a rollout's representation,
// "r-<12 hex digits of its ID>-<generation>": it changes with every state
// change, action and member progress.
func rolloutETag(id string, generation int64) string {
	return `"r-` + idPrefix(id) + "-" + strconv.FormatInt(generation, 10) + `"`
}

// preconditionOf is ifMatch for a resource whose tags etag spells.
func preconditionOf(header *string, id string, etag func(id string, generation int64) string) fleet.Precondition {
	gs, set := generationsOf(header, id, etag)
	if !set {
		return fleet.Precondition{}
	}
	return fleet.ExpectGeneration(gs...)
}

// generationsOf reads an If-Match header on resource id whose tags etag
// spells: set is false without the header, with an empty one or with "*";
// otherwise gs are the generations the listed tags name (none: a definite
// mismatch).
func generationsOf(header *string, id string, etag func(id string, generation int64) string) (gs []int64, set bool) {
	if header == nil || *header == "" || strings.TrimSpace(*header) == "*" {
		return nil, false
	}
	for _, t := range strings.Split(*header, ",") {
		t = strings.TrimSpace(t)
		i := strings.LastIndexByte(t, '-')
		if i < 0 {
			continue
		}
		g, err := strconv.ParseInt(strings.TrimSuffix(t[i+1:], `"`), 10, 64)
		if err == nil && etagMatches(t, etag(id, g), strong) {
			gs = append(gs, g)
		}
	}
	return gs, true
}
