package lifecycle

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveWaveSizes(t *testing.T) {
	w := func(a WaveAmount) Wave { return Wave{Size: a} }
	tests := []struct {
		name      string
		waves     []Wave
		eligible  int
		dropEmpty bool
		want      []int // sizes
		wantIdx   []int // indices kept (nil: 0..n-1)
		wantType  string
		wantPtrs  []string
	}{
		{"defaults over 300", DefaultWaves(), 300, true, []int{1, 30, 269}, nil, "", nil},
		{"defaults over 10", DefaultWaves(), 10, true, []int{1, 1, 8}, nil, "", nil},
		{"defaults over 2 drop the empty last", DefaultWaves(), 2, true, []int{1, 1}, []int{0, 1}, "", nil},
		{"defaults over 1 keep the canary", DefaultWaves(), 1, true, []int{1}, []int{0}, "", nil},
		{"a percent rounds up", []Wave{w(PercentOf(1)), w(PercentOf(100))}, 150, false, []int{2, 148}, nil, "", nil},
		{"a percent is at least 1", []Wave{w(PercentOf(1)), w(PercentOf(100))}, 5, false, []int{1, 4}, nil, "", nil},
		{"a count takes no more than what is left", []Wave{w(CountOf(3)), w(CountOf(10))}, 5, false, []int{3, 2}, nil, "", nil},
		{"counts that cover exactly", []Wave{w(CountOf(2)), w(CountOf(3))}, 5, false, []int{2, 3}, nil, "", nil},
		{"sizes that do not add up", []Wave{w(CountOf(1)), w(PercentOf(10))}, 100, false, nil, nil, ProblemWavesDoNotCover, []string{"/waves"}},
		{"a wave that would be empty", []Wave{w(PercentOf(100)), w(CountOf(1))}, 5, false, nil, nil, ProblemWaveEmpty, []string{"/waves/1"}},
		{"empty and not covering", []Wave{w(CountOf(5)), w(CountOf(1)), w(CountOf(1))}, 5, false, nil, nil, ProblemWaveEmpty, []string{"/waves/1", "/waves/2"}},
		{"no eligible member", DefaultWaves(), 0, true, nil, nil, ProblemNoEligible, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveWaveSizes(tt.waves, tt.eligible, tt.dropEmpty)
			if tt.wantType != "" {
				require.Error(t, err)
				assert.Equal(t, EINVALID, ErrorCode(err))
				assert.Equal(t, tt.wantType, ErrorType(err))
				var ptrs []string
				for _, f := range err.(*Error).Fields {
					ptrs = append(ptrs, f.Pointer)
				}
				assert.Equal(t, tt.wantPtrs, ptrs)
				return
			}
			require.NoError(t, err)
			var sizes, idx []int
			for _, s := range got {
				sizes, idx = append(sizes, s.Size), append(idx, s.Index)
			}
			if !slices.Equal(sizes, tt.want) {
				t.Errorf("ResolveWaveSizes(%d) sizes = %v, want %v", tt.eligible, sizes, tt.want)
			}
			wantIdx := tt.wantIdx
			if wantIdx == nil {
				for i := range tt.want {
					wantIdx = append(wantIdx, i)
				}
			}
			assert.Equal(t, wantIdx, idx)
		})
	}
	_, err := ResolveWaveSizes([]Wave{w(PercentOf(100)), w(CountOf(1))}, 5, false)
	assert.Equal(t, "wave 2 would be empty: the waves before it take all 5 eligible members", err.(*Error).Fields[0].Detail)
	_, err = ResolveWaveSizes([]Wave{w(CountOf(1)), w(PercentOf(10))}, 100, false)
	assert.Equal(t, "the waves cover 11 of 100 eligible members; end with a wave of percent 100", err.(*Error).Fields[0].Detail)
}

func TestWaveAmount(t *testing.T) {
	tests := []struct {
		a             WaveAmount
		n             int
		size, allowed int
	}{
		{CountOf(3), 10, 3, 3},
		{PercentOf(10), 10, 1, 1},
		{PercentOf(10), 11, 2, 1},
		{PercentOf(15), 10, 2, 1},
		{PercentOf(2), 49, 1, 0},
		{PercentOf(2), 50, 1, 1},
		{PercentOf(0), 1000, 0, 0},
		{PercentOf(100), 7, 7, 7},
		{WaveAmount{}, 7, 0, 0},
	}
	for _, tt := range tests {
		if got := tt.a.Size(tt.n); got != tt.size {
			t.Errorf("%s.Size(%d) = %d, want %d", tt.a, tt.n, got, tt.size)
		}
		if got := tt.a.Allowed(tt.n); got != tt.allowed {
			t.Errorf("%s.Allowed(%d) = %d, want %d", tt.a, tt.n, got, tt.allowed)
		}
	}
}

func TestAssignWaves(t *testing.T) {
	keys := []MemberKey{
		{"c2", "d1", "x"}, {"c1", "d2", "a"}, {"c1", "d1", "b"}, {"c1", "d1", "a"}, {"c3", "d0", ""},
	}
	got, err := AssignWaves(keys, []int{1, 2, 2})
	require.NoError(t, err)
	// Sorted: c1/d1/a, c1/d1/b, c1/d2/a, c2/d1/x, c3/d0.
	assert.Equal(t, []int{2, 1, 1, 0, 2}, got)
	assert.Equal(t, MemberKey{"c2", "d1", "x"}, keys[0], "keys are not modified")

	_, err = AssignWaves(keys, []int{1, 2})
	assert.Equal(t, EINTERNAL, ErrorCode(err))
	got, err = AssignWaves(nil, nil)
	require.NoError(t, err)
	assert.Empty(t, got)
}

func TestWaveStartsMatchAssignWaves(t *testing.T) {
	for _, sizes := range [][]int{{1}, {5}, {1, 4}, {1, 2, 2}, {3, 1, 1, 7}, {2, 2, 2, 2, 2}} {
		n := 0
		for _, s := range sizes {
			n += s
		}
		keys := make([]MemberKey, n)
		for i := range keys {
			keys[i] = MemberKey{ClientID: fmt.Sprintf("c%03d", i)}
		}
		want, err := AssignWaves(keys, sizes)
		require.NoError(t, err)
		starts := WaveStarts(sizes)
		for p := range n {
			if got := WaveAt(starts, p); got != want[p] {
				t.Errorf("WaveAt(WaveStarts(%v), %d) = %d, want %d", sizes, p, got, want[p])
			}
		}
	}
	assert.Empty(t, WaveStarts(nil))
}
