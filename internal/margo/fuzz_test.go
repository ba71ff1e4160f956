package margo

import (
	"errors"
	"reflect"
	"testing"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// FuzzParseDescription reads arbitrary bytes as YAML and as JSON. It must
// never panic, every refusal must be a *lifecycle.Error with a code the
// parser documents, and every accepted document must read back from its JSON
// form to the same description and the same JSON.
func FuzzParseDescription(f *testing.F) {
	for _, name := range []string{example1, example2, lifecycleBase} {
		raw := readFile(f, name)
		f.Add(raw)
		p, err := ParseDescription(raw, MediaTypeYAML)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p.JSON)
	}
	f.Add([]byte("a: &a [1, *a]\n"))
	f.Add([]byte("a: &x {b: 1}\nc: *x\n1: 2\n? x\n"))
	f.Add([]byte(`{"apiVersion":"v1","id":"x","metadata":{"name":"n","version":"1"},"deploymentProfiles":[{"type":"helm","id":"p","components":[{"name":"c"}]}]}`))
	f.Add([]byte("apiVersion: v1\nid: x\nmetadata: {name: n, version: \"1\"}\ndeploymentProfiles: [{type: helm, id: p, components: [{name: c}]}]\nx: [0x10, 1e3, -0.0, 2001-12-14, ~, \"\\u0001\"]\n"))

	allowed := map[lifecycle.Code]bool{lifecycle.EMALFORMED: true, lifecycle.EINVALID: true, lifecycle.ETOOLARGE: true}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, mediaType := range []string{MediaTypeYAML, MediaTypeJSON} {
			p, err := ParseDescription(raw, mediaType)
			if err != nil {
				var e *lifecycle.Error
				if !errors.As(err, &e) || !allowed[e.Code] {
					t.Fatalf("%s: error %T %v, want a *lifecycle.Error with a documented code", mediaType, err, err)
				}
				if e.Code == lifecycle.EINVALID && (len(e.Fields) == 0 || len(e.Fields) > MaxProblems) {
					t.Fatalf("%s: EINVALID with %d fields", mediaType, len(e.Fields))
				}
				continue
			}
			again, err := ParseDescription(p.JSON, MediaTypeJSON)
			if err != nil {
				t.Fatalf("%s: accepted, but its JSON form is refused: %v\n%s", mediaType, err, p.JSON)
			}
			if string(again.JSON) != string(p.JSON) {
				t.Fatalf("%s: JSON form not stable:\n%s\n%s", mediaType, p.JSON, again.JSON)
			}
			if !reflect.DeepEqual(again.Description, p.Description) {
				t.Fatalf("%s: description from the JSON form differs:\n%#v\n%#v", mediaType, again.Description, p.Description)
			}
			// Values the description declares pass their own checks.
			if fe := p.Description.ValidateValues(p.Description.DefaultValues()); len(fe) != 0 {
				t.Fatalf("%s: defaults of an accepted description are invalid: %v", mediaType, fe)
			}
		}
	})
}
