package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIntegralNumbers(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1e2,"b":100.0,"c":-2.5e1,"d":1.5,"e":7}`:                                      `{"a":100,"b":100,"c":-25,"d":1.5,"e":7}`,
		`{"s":"1e2 and 3.0","t":"\"4.0\\","n":[0.0,-0.0,2E0]}`:                              `{"s":"1e2 and 3.0","t":"\"4.0\\","n":[0,0,2]}`,
		`[9007199254740992.0, 9007199254740993e0, 1e300, 1e-2]`:                             `[9007199254740992, 9007199254740993e0, 1e300, 1e-2]`,
		`[4503599627370495.5, 2251799813685248.25, 1.00000000000000000001, 123456789e-4]`:   `[4503599627370495.5, 2251799813685248.25, 1.00000000000000000001, 123456789e-4]`,
		`[1e99999999, 12300e-2, -0.5e1, 1E+1]`:                                              `[1e99999999, 123, -5, 10]`,
		`[1000000000000000000000000000000000e-33, 0.0000000000000000000000000000000001e34]`: `[1, 1]`,
		` { "x" : 12 } `: ` { "x" : 12 } `,
		`-1e999`:         `-1e999`,
	} {
		got, changed := integralNumbers([]byte(in))
		assert.Equal(t, want, string(got), in)
		assert.Equal(t, in != want, changed, in)
		var a, b any
		if !strings.Contains(in, "e99") {
			assert.NoError(t, json.Unmarshal([]byte(in), &a), in)
			assert.NoError(t, json.Unmarshal(got, &b), in)
			assert.Equal(t, a, b, "the same values: %s", in)
		}
	}
}
