package lifecycle

import (
	"cmp"
	"fmt"
	"slices"
)

// SizedWave is a wave with its size resolved against the eligible members.
type SizedWave struct {
	Wave
	// Index is the wave's position in the request (in DefaultWaves when the
	// request gave none), for pointers and messages.
	Index int
	Size  int
}

// Problem types of wave resolution.
const (
	ProblemWavesDoNotCover = "waves-do-not-cover" // EINVALID: the sizes add up to less than the eligible count
	ProblemWaveEmpty       = "wave-empty"         // EINVALID: a wave would take no member
	ProblemNoEligible      = "no-eligible-members"
)

// Size returns how many members an amount is of n: a count as is, a
// percent of n rounded up (so that 10% of 5 is 1, not 0). It does not cap
// at n.
func (a WaveAmount) Size(n int) int {
	switch {
	case a.Count != nil:
		return *a.Count
	case a.Percent != nil:
		return (*a.Percent*n + 99) / 100
	}
	return 0
}

// Allowed returns how many failures an amount allows in a wave of n
// counted members: a count as is, a percent of n rounded down (a wave of
// 10 with maxFailures 15% allows 1 failure, not 2: a threshold errs on the
// side of stopping).
func (a WaveAmount) Allowed(n int) int {
	switch {
	case a.Count != nil:
		return *a.Count
	case a.Percent != nil:
		return *a.Percent * n / 100
	}
	return 0
}

// ResolveWaveSizes takes waves in order from eligible members: each wave's
// size (Size, at least 1), never more than what is left. The waves must
// cover every eligible member and none may be empty; with dropEmpty (the
// request gave no waves and DefaultWaves apply) an empty wave is left out
// instead, so that a fleet of two gets a canary and one more wave.
//
// Returns EINVALID (type "no-eligible-members") when eligible is 0 (the
// caller refuses that case first, with the counts by reason:
// NoEligibleError); EINVALID (type "wave-empty", a FieldError at
// /waves/{i} per empty wave: "wave K would be empty", K counting from 1)
// and EINVALID (type "waves-do-not-cover", FieldError /waves: "the waves
// cover N of M eligible members; end with a wave of percent 100"), both
// listed when both apply.
func ResolveWaveSizes(waves []Wave, eligible int, dropEmpty bool) ([]SizedWave, error) {
	if eligible <= 0 {
		return nil, &Error{Code: EINVALID, Type: ProblemNoEligible, Message: "The rollout has no eligible member."}
	}
	out := make([]SizedWave, 0, len(waves))
	var fe []FieldError
	left := eligible
	for i, w := range waves {
		n := min(max(w.Size.Size(eligible), 1), left)
		if n == 0 {
			if !dropEmpty {
				fe = append(fe, FieldError{Pointer: fmt.Sprintf("/waves/%d", i),
					Detail: fmt.Sprintf("wave %d would be empty: the waves before it take all %d eligible members", i+1, eligible)})
			}
			continue
		}
		left -= n
		out = append(out, SizedWave{Wave: w, Index: i, Size: n})
	}
	typ := ProblemWaveEmpty
	if left > 0 {
		typ = ProblemWavesDoNotCover
		fe = append(fe, FieldError{Pointer: "/waves",
			Detail: fmt.Sprintf("the waves cover %d of %d eligible members; end with a wave of percent 100", eligible-left, eligible)})
	}
	if len(fe) > 0 {
		return nil, &Error{Code: EINVALID, Type: typ, Fields: fe,
			Message: fmt.Sprintf("The waves do not fit the %d eligible members: %s.", eligible, fe[0].Detail) + more(len(fe)),
			Extra:   map[string]any{"eligible": eligible}}
	}
	return out, nil
}

// MemberKey identifies a member in the stable order waves are taken in:
// client id, then device id, then deployment id ("" for an install
// rollout's member, which is a device).
type MemberKey struct {
	ClientID, DeviceID, DeploymentID string
}

// CompareMemberKeys orders member keys by client id, device id and
// deployment id, byte by byte (the C collation of the database).
func CompareMemberKeys(a, b MemberKey) int {
	return cmp.Or(cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.DeviceID, b.DeviceID), cmp.Compare(a.DeploymentID, b.DeploymentID))
}

// AssignWaves assigns eligible members to waves of the given sizes, in the
// stable order of their keys: the first sizes[0] members to wave 0, the
// next sizes[1] to wave 1, and so on. It returns, for each key in the
// order given, its wave index; keys is not modified.
//
// Returns EINTERNAL when the sizes do not add up to len(keys) (the caller
// resolves them with ResolveWaveSizes over the same members).
func AssignWaves(keys []MemberKey, sizes []int) ([]int, error) {
	total := 0
	for _, s := range sizes {
		total += s
	}
	if total != len(keys) {
		return nil, Errorf(EINTERNAL, "wave sizes add up to %d, but there are %d eligible members", total, len(keys))
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return CompareMemberKeys(keys[a], keys[b]) })
	out := make([]int, len(keys))
	wave, left := 0, 0
	for _, i := range order {
		for left == 0 {
			left = sizes[wave]
			wave++
		}
		out[i] = wave - 1
		left--
	}
	return out, nil
}

// WaveStarts returns, for waves of the given sizes, the place among the
// eligible members (counted from 0 in the stable order of their keys) at
// which each wave after the first starts: the eligible member at place p
// is in wave k (from 0) where k is the number of starts at or below p.
// That is the assignment of AssignWaves, for a store that numbers the
// eligible members as it writes them instead of holding their keys.
func WaveStarts(sizes []int) []int {
	starts := make([]int, 0, len(sizes))
	at := 0
	for _, s := range sizes[:max(len(sizes)-1, 0)] {
		at += s
		starts = append(starts, at)
	}
	return starts
}

// WaveAt returns the wave (from 0) of the eligible member at place p
// (from 0) given the starts of WaveStarts.
func WaveAt(starts []int, p int) int {
	k, _ := slices.BinarySearch(starts, p+1)
	return k
}
