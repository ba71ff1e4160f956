package margo

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// SpecCache keeps the encoded spec of rendered ApplicationDeployments, so
// that documents that differ only in their id, name, namespace and device
// (a fleet of deployments of one version with the same parameters: an
// install over thousands of devices) are encoded once: the YAML encoder is
// most of a creation's CPU time. The spec is a function of the description,
// the profile, the values and the extension only; the cache keys on the
// description's identity (a pointer: descriptions are not changed once
// parsed), the profile's id (RenderDeployment checks that the profile is
// the description's, unchanged), the values (their types and values) and
// the extension. Rendering through the cache gives the same bytes as
// RenderDeployment (TestSpecCacheSameBytes).
//
// It holds at most its capacity of specs and is emptied when full (a
// creation wave repeats few keys; a least-recently-used order would not pay
// for itself). A nil *SpecCache renders without caching. Safe for
// concurrent use.
type SpecCache struct {
	mu  sync.Mutex
	max int
	m   map[specKey][]byte
}

// NewSpecCache returns a cache of at most n specs (at least 1).
func NewSpecCache(n int) *SpecCache {
	return &SpecCache{max: max(n, 1), m: map[specKey][]byte{}}
}

// Render is RenderDeployment with the spec taken from the cache when it was
// encoded before.
func (c *SpecCache) Render(in DeploymentInput) ([]byte, error) {
	return render(in, c)
}

// Len returns the number of specs held.
func (c *SpecCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// specKey is what a spec is a function of.
type specKey struct {
	desc      *ApplicationDescription
	profile   string
	values    string
	revision  int
	operation lifecycle.OperationKind
	from      string
	strategy  lifecycle.Strategy
	drain     bool
	required  bool
	timeout   time.Duration
	onTimeout lifecycle.OnTimeout
}

// key returns in's key, and false when in cannot be cached (no cache, or a
// value of a type the key does not spell).
func (c *SpecCache) key(in DeploymentInput) (specKey, bool) {
	if c == nil || in.Description == nil {
		return specKey{}, false
	}
	values, ok := valuesKey(in.Values)
	if !ok {
		return specKey{}, false
	}
	k := specKey{desc: in.Description, profile: in.Profile.ID, values: values, revision: in.Extension.Revision,
		operation: in.Extension.Operation, from: in.Extension.FromVersion.String(), strategy: in.Extension.Strategy}
	if d := in.Extension.Drain; d != nil {
		k.drain, k.required, k.timeout, k.onTimeout = true, d.Required, d.Timeout, d.OnTimeout
	}
	return k, true
}

func (c *SpecCache) get(k specKey) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *SpecCache) put(k specKey, spec []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = spec
}

// valuesKey spells values with the Go type of every value, so that values
// the renderer writes differently (int 1 and float64 1, "1" and 1) never
// share a key. It returns false for a type it does not know.
func valuesKey(values map[string]any) (string, bool) {
	var b strings.Builder
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b.WriteString(strconv.Quote(name))
		b.WriteByte('=')
		if !writeValueKey(&b, values[name]) {
			return "", false
		}
		b.WriteByte(';')
	}
	return b.String(), true
}

func writeValueKey(b *strings.Builder, v any) bool {
	switch x := v.(type) {
	case nil:
		b.WriteString("nil")
	case string:
		b.WriteString("s" + strconv.Quote(x))
	case json.Number:
		b.WriteString("n" + strconv.Quote(string(x)))
	case bool:
		b.WriteString("b" + strconv.FormatBool(x))
	case float64:
		b.WriteString("f" + strconv.FormatFloat(x, 'g', -1, 64))
	case float32:
		b.WriteString("f32" + strconv.FormatFloat(float64(x), 'g', -1, 32))
	case int, int8, int16, int32, int64:
		b.WriteString("i" + strconv.FormatInt(reflect.ValueOf(x).Int(), 10))
	case uint, uint8, uint16, uint32, uint64, uintptr:
		b.WriteString("u" + strconv.FormatUint(reflect.ValueOf(x).Uint(), 10))
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice {
			return false
		}
		b.WriteString("[" + rv.Type().String() + ":")
		for i := range rv.Len() {
			if !writeValueKey(b, rv.Index(i).Interface()) {
				return false
			}
			b.WriteByte(',')
		}
		b.WriteByte(']')
	}
	return true
}
