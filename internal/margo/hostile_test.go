package margo

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// billionLaughs is the classic alias bomb: ten levels of ten aliases each,
// 10^9 strings once expanded, a few hundred bytes as written.
func billionLaughs() []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for i := range 8 {
		name := string(rune('b' + i))
		fmt.Fprintf(&b, "%s: &%s [", name, name)
		for j := range 10 {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
		prev = name
	}
	fmt.Fprintf(&b, "metadata: [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n", prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
	return []byte(b.String())
}

// wideAliases is an alias bomb in breadth: one big list referred to many
// times, each reference cheap to write.
func wideAliases() []byte {
	var b strings.Builder
	b.WriteString("big: &big [")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("x")
	}
	b.WriteString("]\nrefs: [")
	for i := range 5000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*big")
	}
	b.WriteString("]\n")
	return []byte(b.String())
}

type hostileCase struct {
	name      string
	raw       []byte
	mediaType string
	code      lifecycle.Code
}

func hostileCases() []hostileCase {
	rng := rand.New(rand.NewPCG(7, 7))
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	deepFlow := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	deepJSON := `{"a":` + deepFlow + `}`
	deepBlock := strings.Repeat("- ", 100_000) + "x\n"
	var deepMap strings.Builder
	for i := range 100 { // within the parser's limits, beyond ours
		deepMap.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	manyNodes := "a: [" + strings.Repeat("0,", MaxNodes) + "0]\n"
	// A long string used many times: few nodes, gigabytes once expanded.
	stringBomb := "s: &s \"" + strings.Repeat("x", 900_000) + "\"\nb: [" + strings.Repeat("*s,", 10_000) + "*s]\n"
	return []hostileCase{
		{"billion laughs", billionLaughs(), MediaTypeYAML, lifecycle.ETOOLARGE},
		{"wide aliases", wideAliases(), MediaTypeYAML, lifecycle.ETOOLARGE},
		{"self-referencing alias", []byte("a: &x {b: *x}\n"), MediaTypeYAML, lifecycle.EMALFORMED},
		{"100k-deep flow YAML", []byte("a: " + deepFlow + "\n"), MediaTypeYAML, lifecycle.EMALFORMED},
		{"100k-deep block YAML", []byte(deepBlock), MediaTypeYAML, lifecycle.EMALFORMED},
		{"100-deep mapping YAML", []byte(deepMap.String()), MediaTypeYAML, lifecycle.EMALFORMED},
		{"100k-deep JSON", []byte(deepJSON), MediaTypeJSON, lifecycle.EMALFORMED},
		{"100k-deep JSON as YAML", []byte(deepJSON), MediaTypeYAML, lifecycle.EMALFORMED},
		{"too many nodes YAML", []byte(manyNodes), MediaTypeYAML, lifecycle.ETOOLARGE},
		{"string alias bomb", []byte(stringBomb), MediaTypeYAML, lifecycle.ETOOLARGE},
		{"too many nodes JSON", []byte(`{"a":[` + strings.Repeat("0,", MaxNodes) + `0]}`), MediaTypeJSON, lifecycle.ETOOLARGE},
		{"oversize", append([]byte("a: "), bytes.Repeat([]byte("x"), MaxDescriptionSize)...), MediaTypeYAML, lifecycle.ETOOLARGE},
		{"oversize JSON", bytes.Repeat([]byte(" "), MaxDescriptionSize+1), MediaTypeJSON, lifecycle.ETOOLARGE},
		{"duplicate keys YAML", []byte("apiVersion: v1\napiVersion: v1\n"), MediaTypeYAML, lifecycle.EMALFORMED},
		{"duplicate keys JSON", []byte(`{"apiVersion":"v1","apiVersion":"v1"}`), MediaTypeJSON, lifecycle.EMALFORMED},
		{"list at top YAML", []byte("- apiVersion: v1\n"), MediaTypeYAML, lifecycle.EMALFORMED},
		{"scalar at top YAML", []byte("42\n"), MediaTypeYAML, lifecycle.EMALFORMED},
		{"list at top JSON", []byte(`[{"apiVersion":"v1"}]`), MediaTypeJSON, lifecycle.EMALFORMED},
		{"binary garbage YAML", garbage, MediaTypeYAML, lifecycle.EMALFORMED},
		{"binary garbage JSON", garbage, MediaTypeJSON, lifecycle.EMALFORMED},
		{"NUL bytes", make([]byte, 1024), MediaTypeYAML, lifecycle.EMALFORMED},
		{"UTF-16 JSON", []byte("\xff\xfe{\x00}\x00"), MediaTypeJSON, lifecycle.EMALFORMED},
	}
}

// TestParseHostile feeds inputs built to exhaust a parser. Each must fail
// with the right code; a hang would be caught by go test's timeout, and
// BenchmarkParseHostile shows each takes milliseconds.
func TestParseHostile(t *testing.T) {
	for _, tt := range hostileCases() {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseDescription(tt.raw, tt.mediaType)
			if err == nil {
				t.Fatalf("ParseDescription accepted it: %s", p.JSON[:min(len(p.JSON), 100)])
			}
			var e *lifecycle.Error
			if !errors.As(err, &e) || e.Code != tt.code {
				t.Fatalf("ParseDescription = %v, want code %s", err, tt.code)
			}
			if e.Message == "" || len(e.Message) > 1000 {
				t.Errorf("message of %d bytes: %.200q", len(e.Message), e.Message)
			}
		})
	}
}

func BenchmarkParseHostile(b *testing.B) {
	for _, tt := range hostileCases() {
		b.Run(tt.name, func(b *testing.B) {
			b.SetBytes(int64(len(tt.raw)))
			for b.Loop() {
				if _, err := ParseDescription(tt.raw, tt.mediaType); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

func BenchmarkParseExample(b *testing.B) {
	raw := readFile(b, lifecycleBase)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := ParseDescription(raw, MediaTypeYAML); err != nil {
			b.Fatal(err)
		}
	}
}
