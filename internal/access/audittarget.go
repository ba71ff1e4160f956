package access

import (
	"strings"

	"github.com/google/uuid"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// auditTargets maps a resource kind of the audit filter to its collection
// in the management API, and says whether its ids are UUIDs. The kinds are
// the contract's AuditTargetKind; a device is addressed under its client.
var auditTargets = map[string]struct {
	collection string
	uuid       bool
}{
	"application": {"/mgmt/v1/applications/", false},
	"client":      {"/mgmt/v1/clients/", false},
	"device":      {"/mgmt/v1/clients/", false},
	"deployment":  {"/mgmt/v1/deployments/", true},
	"operation":   {"/mgmt/v1/operations/", true},
	"rollout":     {"/mgmt/v1/rollouts/", true},
	"token":       {"/mgmt/v1/tokens/", false},
	"webhook":     {"/mgmt/v1/webhooks/", true},
}

// AuditTargetPath returns the path of the resource of kind and id, as the
// audit log records the calls addressed to it: a call's target is that path
// or a path below it (a deployment's upgrade is its path + "/upgrade").
// Both or neither of kind and id must be given; with neither it returns "".
//
// Returns EINVALID with a field error at query/targetKind (an unknown kind,
// or an id without a kind) or query/targetId (a kind without an id, a
// deployment, operation, rollout or webhook id that is not a UUID, a device
// not named <clientId>/<deviceId>, a "/" in any other id).
func AuditTargetPath(kind, id string) (string, error) {
	bad := func(field, detail string) error {
		return &lifecycle.Error{Code: lifecycle.EINVALID, Type: "invalid-request",
			Message: "The audit filter's target is not valid.",
			Fields:  []lifecycle.FieldError{{Pointer: "query/" + field, Detail: detail}}}
	}
	switch {
	case kind == "" && id == "":
		return "", nil
	case kind == "":
		return "", bad("targetKind", "required with targetId")
	case id == "":
		return "", bad("targetId", "required with targetKind")
	}
	t, ok := auditTargets[kind]
	if !ok {
		return "", bad("targetKind", "not a kind of audit target")
	}
	if t.uuid {
		if u, err := uuid.Parse(id); err != nil || u.String() != strings.ToLower(id) {
			return "", bad("targetId", article(kind)+" "+kind+" id is a UUID")
		}
		return t.collection + strings.ToLower(id), nil
	}
	if kind == "device" {
		client, device, ok := strings.Cut(id, "/")
		if !ok || client == "" || device == "" || strings.Contains(device, "/") {
			return "", bad("targetId", "a device is named <clientId>/<deviceId>")
		}
		return t.collection + client + "/devices/" + device, nil
	}
	if strings.Contains(id, "/") {
		return "", bad("targetId", article(kind)+" "+kind+" id holds no \"/\"")
	}
	return t.collection + id, nil
}

// CanonicalTarget is the target an audit entry records for a request path:
// the path with every segment that is a UUID in lower case (a UUID is
// accepted in any case in a path), so that the filter by target finds a
// call whatever case its caller wrote the id in. Other segments (client
// and device ids) are case-sensitive and kept as they are.
func CanonicalTarget(path string) string {
	segs := strings.Split(path, "/")
	changed := false
	for i, s := range segs {
		if len(s) == 36 && s != strings.ToLower(s) {
			if _, err := uuid.Parse(s); err == nil {
				segs[i], changed = strings.ToLower(s), true
			}
		}
	}
	if !changed {
		return path
	}
	return strings.Join(segs, "/")
}

// article is the indefinite article before word ("an operation").
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}
