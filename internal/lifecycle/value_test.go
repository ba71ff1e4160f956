package lifecycle

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestParseNumber(t *testing.T) {
	tests := []struct {
		in      string
		want    any
		wantErr bool
	}{
		{"30", int64(30), false},
		{"-9223372036854775808", int64(math.MinInt64), false},
		{"9223372036854775808", uint64(1 << 63), false},
		{"18446744073709551616", float64(1 << 64), false},
		{"30.0", 30.0, false},
		{"1e2", 100.0, false},
		{"1e999", nil, true},
		{"x", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseNumber(tt.in)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseNumber(%q) = %#v, %v, want %#v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNormalizeValue(t *testing.T) {
	tests := []struct {
		name    string
		in      any
		want    any
		wantErr string
	}{
		{"nil", nil, nil, ""},
		{"int", 3, int64(3), ""},
		{"uint8", uint8(3), int64(3), ""},
		{"uint stays unsigned", uint(3), uint64(3), ""},
		{"float32", float32(0.5), 0.5, ""},
		{"json integer", json.Number("7"), int64(7), ""},
		{"json float", json.Number("7.5"), 7.5, ""},
		{"json out of range", json.Number("1e999"), nil, "number 1e999 is out of range"},
		{"NaN", math.NaN(), nil, "must be a finite number"},
		{"infinity", math.Inf(1), nil, "must be a finite number"},
		{"typed slice", []string{"a", "b"}, []any{"a", "b"}, ""},
		{"list of numbers", []any{1, json.Number("2")}, []any{int64(1), int64(2)}, ""},
		{"nested list", []any{"a", []any{1}}, nil, "item 1 must be a string, number or boolean, got a list"},
		{"nested typed list", []any{[]byte("a")}, nil, "item 0 must be a string, number or boolean, got a list"},
		{"bad item", []any{math.NaN()}, nil, "item 0 must be a finite number"},
		{"too many items", []any{1, 2, 3}, nil, "must have at most 2 items, got 3"},
		{"too many typed items", []int{1, 2, 3}, nil, "must have at most 2 items, got 3"},
		{"object", map[string]any{}, nil, "must be a string, number, boolean or a list of them, got an object"},
		{"struct", struct{}{}, nil, "must be a string, number, boolean or a list of them, got struct {}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeValue(tt.in, 2)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("NormalizeValue(%#v) = %#v, %q, want %#v, %q", tt.in, got, gotErr, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCompareNumbers(t *testing.T) {
	tests := []struct {
		a, b   any
		want   int
		wantOK bool
	}{
		{int64(1), 2.0, -1, true},
		{uint64(math.MaxUint64), float64(math.MaxUint64), -1, true}, // 2^64-1 < 2^64
		{json.Number("30"), 30, 0, true},
		{3.5, int64(3), 1, true},
		{"3", 3, 0, false},
		{math.NaN(), 1, 0, false},
		{nil, 1, 0, false},
	}
	for _, tt := range tests {
		got, ok := CompareNumbers(tt.a, tt.b)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("CompareNumbers(%#v, %#v) = %d, %v, want %d, %v", tt.a, tt.b, got, ok, tt.want, tt.wantOK)
		}
		if IsNumber(tt.a) && IsNumber(tt.b) != tt.wantOK {
			t.Errorf("IsNumber(%#v) = %v, want %v", tt.b, IsNumber(tt.b), tt.wantOK)
		}
	}
}
