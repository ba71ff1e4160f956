package margo

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// readerNodes is the number of nodes the tree reader counts in the YAML
// document raw (aliases expanded), or -1 if it refuses it.
func readerNodes(t *testing.T, raw []byte) int {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) != 1 {
		return -1
	}
	r := &yamlReader{}
	if _, err := r.value(doc.Content[0], 1); err != nil {
		return -1
	}
	return r.nodes
}

// randomValue is a random document value: nested mappings and lists, and
// scalars that hold what a YAML scanner must not take for structure.
func randomValue(rng *rand.Rand, depth int) any {
	scalars := []any{"plain", "a: b", "- dash", "# hash", "it's", `say "hi"`, "x #y", "{not: flow}", "[1, 2]",
		"line one\nline two\n", "  indented\n- list: x\n", "ends with colon:", "*star", "&amp", "!bang", "--- doc", 42, 3.5, true, nil, ""}
	if depth > 4 || rng.IntN(3) == 0 {
		return scalars[rng.IntN(len(scalars))]
	}
	if rng.IntN(2) == 0 {
		out := []any{}
		for range rng.IntN(5) {
			out = append(out, randomValue(rng, depth+1))
		}
		return out
	}
	out := map[string]any{}
	for i := range rng.IntN(5) {
		k := fmt.Sprintf("k%d", i)
		if rng.IntN(4) == 0 {
			k = scalars[rng.IntN(10)].(string) + k
		}
		out[k] = randomValue(rng, depth+1)
	}
	return out
}

// setFlow writes every collection below depth d of n in flow style.
func setFlow(n *yaml.Node, d int) {
	if d <= 0 && (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		setFlow(c, d-1)
	}
}

// TestCheckYAMLCountsALowerBound checks what makes the pre-scan safe and
// useful: on every document it never counts more nodes than the tree
// reader does (so it refuses nothing the reader accepts), and it counts
// nearly all of them (so what it lets through stays near MaxNodes).
func TestCheckYAMLCountsALowerBound(t *testing.T) {
	var docs [][]byte
	for _, dir := range []string{"testdata", "../../examples"} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				b, err := os.ReadFile(p)
				if err == nil {
					docs = append(docs, b)
				}
			}
			return nil
		})
	}
	if len(docs) < 5 {
		t.Fatalf("found %d YAML files to check", len(docs))
	}
	for _, d := range []string{
		"k: a\n  'x\nbig: [1, 2]\nz: b'c\n", // a plain scalar goes on over a quote
		"- key: |\n  other: x\n- |\n   text\n   - not: an entry\n  # comment\n- [a, {b: c}, d: e]\n",
		"a: >-\n    folded # not a comment\n\n    - more\nb: 'it''s: [x]'\nc: \"q \\\" [x]\"\nd: it's\ne: x #c: [1, 2]\n",
		"? complex\n: value\n? [a, b]\n: c\n[x, y]: z\n",
		"a: &x [1, 2]\nb: *x\nc: {p: *x, q: [*x, *x]}\n",
		"a:\n  b:\n    - c: 1\n      d: [1,\n        2, 'multi\n        line']\n    - e\n",
		"--- |\n  a: text\n",
		"  indented: top\n  b: [1, 2]\n",
		"url: oci://example.com/x:1.0\nt: a:b\n\"q\": 1\n'r': {\"s\":1}\n",
	} {
		docs = append(docs, []byte(d))
	}
	rng := rand.New(rand.NewPCG(33, 1))
	for i := range 3000 {
		v := map[string]any{"top": randomValue(rng, 0), "n": i}
		var n yaml.Node
		if err := n.Encode(v); err != nil {
			continue // the encoder writes some strings it cannot read back
		}
		setFlow(&n, rng.IntN(6)) // block above a random depth, flow below
		b, err := yaml.Marshal(&n)
		if err != nil {
			continue // a multi-line string in flow style: the encoder cannot write it
		}
		docs = append(docs, b)
	}
	total, counted := 0, 0
	for _, raw := range docs {
		want := readerNodes(t, raw)
		if want < 0 {
			continue
		}
		got, err := countYAML(raw)
		if err != nil || got > want {
			t.Fatalf("countYAML = %d, %v; the reader counts %d nodes in:\n%s", got, err, want, raw)
		}
		total, counted = total+want, counted+got
	}
	if counted < total*8/10 {
		t.Errorf("countYAML counted %d of %d nodes; want at least 80%%", counted, total)
	}
	t.Logf("countYAML counted %d of %d nodes in %d documents", counted, total, len(docs))
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hostileShape is one body built to cost a parser memory, with the error
// it must get and the most ParseDescription may allocate refusing it.
type hostileShape struct {
	name      string
	raw       []byte
	mediaType string
	code      lifecycle.Code
	maxAlloc  uint64
}

const mib = 1 << 20

// hostileShapes are the bodies of about MaxDescriptionSize that cost most
// per byte, one per shape.
func hostileShapes() []hostileShape {
	fill := func(prefix, item, sep, suffix string) []byte {
		n := (MaxDescriptionSize - len(prefix) - len(suffix)) / (len(item) + len(sep))
		return []byte(prefix + strings.Repeat(item+sep, n-1) + item + suffix)
	}
	var keys strings.Builder
	for i := 0; keys.Len() < MaxDescriptionSize-20; i++ {
		fmt.Fprintf(&keys, "k%d: 1\n", i)
	}
	var jsonKeys strings.Builder
	jsonKeys.WriteString("{")
	for i := 0; jsonKeys.Len() < MaxDescriptionSize-20; i++ {
		fmt.Fprintf(&jsonKeys, `"k%d":1,`, i)
	}
	jsonKeysDoc := strings.TrimSuffix(jsonKeys.String(), ",") + "}"
	long := strings.Repeat("x", MaxDescriptionSize)
	return []hostileShape{
		{"YAML flat flow list", fill("big: [", "1", ",", "]\n"), MediaTypeYAML, lifecycle.ETOOLARGE, 1 * mib},
		{"YAML flat block list", fill("big:\n", "- 1", "\n", "\n"), MediaTypeYAML, lifecycle.ETOOLARGE, 1 * mib},
		{"YAML many keys", []byte(keys.String()), MediaTypeYAML, lifecycle.ETOOLARGE, 1 * mib},
		{"YAML flow mapping of many keys", fill("big: {", "a", ",", "}\n"), MediaTypeYAML, lifecycle.ETOOLARGE, 1 * mib},
		{"YAML deep flow nesting", []byte("a: " + strings.Repeat("[", MaxDescriptionSize/2-10) + strings.Repeat("]", MaxDescriptionSize/2-10) + "\n"), MediaTypeYAML, lifecycle.EMALFORMED, 1 * mib},
		{"YAML deep block nesting", []byte(strings.Repeat("- ", MaxDescriptionSize/2-1) + "x"), MediaTypeYAML, lifecycle.EMALFORMED, 1 * mib},
		{"YAML alias bomb", billionLaughs(), MediaTypeYAML, lifecycle.ETOOLARGE, 64 * mib},
		{"YAML long string over the size", []byte("s: " + long), MediaTypeYAML, lifecycle.ETOOLARGE, 1 * mib},
		{"JSON flat list", fill(`{"big":[`, "1", ",", "]}"), MediaTypeJSON, lifecycle.ETOOLARGE, 32 * mib},
		{"JSON many keys", []byte(jsonKeysDoc), MediaTypeJSON, lifecycle.ETOOLARGE, 32 * mib},
		{"JSON deep nesting", []byte(`{"a":` + strings.Repeat("[", MaxDescriptionSize/2-10) + strings.Repeat("]", MaxDescriptionSize/2-10) + "}"), MediaTypeJSON, lifecycle.EMALFORMED, 1 * mib},
		{"JSON long string over the size", []byte(`{"s":"` + long + `"}`), MediaTypeJSON, lifecycle.ETOOLARGE, 1 * mib},
	}
}

// TestHostileShapesStopAtTheirLimit parses each hostile shape and checks
// that it is refused at its limit having allocated at most its stated
// bound: a YAML list of 500,000 items built whole as yaml.Node values is
// some 140 MiB.
func TestHostileShapesStopAtTheirLimit(t *testing.T) {
	for _, tt := range hostileShapes() {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			got := allocated(func() { _, err = ParseDescription(tt.raw, tt.mediaType) })
			var e *lifecycle.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Fatalf("ParseDescription = %v, want code %s", err, tt.code)
			}
			if got > tt.maxAlloc {
				t.Errorf("ParseDescription allocated %.1f MiB refusing %d bytes; want at most %.0f MiB", float64(got)/mib, len(tt.raw), float64(tt.maxAlloc)/mib)
			}
			t.Logf("%d bytes: %s; allocated %.2f MiB", len(tt.raw), e.Message, float64(got)/mib)
		})
	}
}

// TestCheckBoundsAllocateLittle checks the pre-scans the HTTP adapter runs
// before anything decodes a body: on every hostile shape they allocate
// far less than the body's size.
func TestCheckBoundsAllocateLittle(t *testing.T) {
	for _, tt := range hostileShapes() {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			got := allocated(func() { err = CheckDescriptionBounds(tt.raw, tt.mediaType) })
			if tt.name == "YAML alias bomb" {
				if err != nil {
					t.Fatalf("CheckDescriptionBounds = %v; aliases are the reader's to count", err)
				}
			} else if lifecycle.ErrorCode(err) != tt.code {
				t.Fatalf("CheckDescriptionBounds = %v, want code %s", err, tt.code)
			}
			if got > mib/4 {
				t.Errorf("CheckDescriptionBounds allocated %d bytes on %d", got, len(tt.raw))
			}
		})
	}
}

// TestCheckBoundsSayWhatTheParserSays checks that a pre-scan refuses with
// the parser's own type and words.
func TestCheckBoundsSayWhatTheParserSays(t *testing.T) {
	for _, tt := range []struct {
		name      string
		raw       string
		mediaType string
	}{
		{"YAML nodes", "a: [" + strings.Repeat("0,", MaxNodes) + "0]\n", MediaTypeYAML},
		{"JSON nodes", `{"a":[` + strings.Repeat("0,", MaxNodes) + `0]}`, MediaTypeJSON},
		{"JSON depth", `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, MediaTypeJSON},
		{"JSON depth on lines", "{\n \"a\":\n" + strings.Repeat(" [\n", 70) + strings.Repeat("]", 70) + "}", MediaTypeJSON},
		{"size", "a: " + strings.Repeat("x", MaxDescriptionSize), MediaTypeYAML},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, parseErr := ParseDescription([]byte(tt.raw), tt.mediaType)
			checkErr := CheckDescriptionBounds([]byte(tt.raw), tt.mediaType)
			var pe, ce *lifecycle.Error
			if !errors.As(parseErr, &pe) || !errors.As(checkErr, &ce) {
				t.Fatalf("ParseDescription = %v, CheckDescriptionBounds = %v", parseErr, checkErr)
			}
			if pe.Code != ce.Code || pe.Type != ce.Type || pe.Message != ce.Message {
				t.Errorf("CheckDescriptionBounds = %s %s %q, ParseDescription = %s %s %q", ce.Code, ce.Type, ce.Message, pe.Code, pe.Type, pe.Message)
			}
		})
	}
}
