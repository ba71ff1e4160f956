package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/wfm-dev/wfm/internal/margo"
)

// Sizes of the hostile-bodies group.
const (
	hostileConcurrent = 32 // bodies sent at once
	hostileRounds     = 5  // rounds of hostileConcurrent
)

// hostileFigures measures what hostile request bodies cost the server
// (issue 33): rounds of hostileConcurrent application descriptions of the
// largest accepted size (1 MiB), of mixed shapes built to cost a parser
// memory (flat lists, many keys, deep nesting, an alias bomb, long strings,
// and documents just under the node limit, which are parsed whole), sent
// at once to POST /mgmt/v1/applications:
//   - hostile-bodies: by one operator token (beyond the caller's decoding
//     bound the answer is 429);
//   - hostile-bodies-tokens: each by its own operator token (beyond the
//     server's decoding bound the answer is 503).
//
// Each reports the server's peak resident set (VmHWM, from the start of the
// group's own server) and the slowest answer.
func hostileFigures(ctx context.Context, b *bench) ([]Figure, error) {
	var figs []Figure
	bodies := hostileBodies()
	for _, name := range []string{"hostile-bodies", "hostile-bodies-tokens"} {
		// A fresh server each: VmHWM is the peak since its start.
		s, err := b.startServer(ctx, name, "warn")
		if err != nil {
			return figs, err
		}
		f, err := hostileRun(ctx, s, name, bodies, name == "hostile-bodies-tokens")
		s.stop()
		if err != nil {
			return figs, err
		}
		figs = append(figs, f)
		fmt.Fprintln(b.cfg.log, f.Line())
	}
	return figs, nil
}

// hostileRun sends the rounds to s and reads its peak memory.
func hostileRun(ctx context.Context, s *server, name string, bodies []hostileBody, manyTokens bool) (Figure, error) {
	var err error
	a := newAPI(s, hostileConcurrent)
	defer a.close()
	tokens := make([]string, 1, hostileConcurrent)
	if tokens[0], err = a.operatorToken(ctx, "hostile-0"); err != nil {
		return Figure{}, err
	}
	for i := 1; manyTokens && i < hostileConcurrent; i++ {
		t, err := a.operatorToken(ctx, fmt.Sprintf("hostile-%d", i))
		if err != nil {
			return Figure{}, err
		}
		tokens = append(tokens, t)
	}
	statuses := map[int]int{}
	var slowest time.Duration
	var slowestWhat string
	for round := range hostileRounds {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		var firstErr error
		for i := range hostileConcurrent {
			body := bodies[(round*hostileConcurrent+i)%len(bodies)]
			token := tokens[i%len(tokens)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				h := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {body.contentType}}
				res, _, err := a.do(ctx, http.MethodPost, s.mgmt+"/mgmt/v1/applications", h, body.raw,
					http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity,
					http.StatusTooManyRequests, http.StatusServiceUnavailable)
				took := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", body.name, err)
					}
					return
				}
				statuses[res.StatusCode]++
				if took > slowest {
					slowest, slowestWhat = took, fmt.Sprintf("%s, %d", body.name, res.StatusCode)
				}
			}()
		}
		close(start)
		wg.Wait()
		if firstErr != nil {
			return Figure{}, firstErr
		}
	}
	_, hwm, err := s.memory()
	if err != nil {
		return Figure{}, err
	}
	var counts []string
	codes := make([]int, 0, len(statuses))
	for c := range statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		counts = append(counts, fmt.Sprintf("%d × %d", statuses[c], c))
	}
	who := "one operator token"
	if manyTokens {
		who = fmt.Sprintf("%d operator tokens", hostileConcurrent)
	}
	return Figure{Name: name, Value: float64(hwm) / (1 << 20), Unit: "MiB peak RSS (VmHWM)", Target: "< 300 MiB; slowest answer < 1 s",
		Notes: []string{fmt.Sprintf("slowest answer %s (%s)", slowest.Round(time.Millisecond), slowestWhat),
			fmt.Sprintf("%d rounds of %d bodies of about 1 MiB at once, %d shapes, from %s; answers %s",
				hostileRounds, hostileConcurrent, len(bodies), who, strings.Join(counts, ", "))}}, nil
}

// operatorToken creates an operator token and returns its secret.
func (a *api) operatorToken(ctx context.Context, name string) (string, error) {
	body := fmt.Appendf(nil, `{"name":%q,"role":"operator"}`, name)
	_, b, err := a.do(ctx, http.MethodPost, a.s.mgmt+"/mgmt/v1/tokens", a.mgmtHeader("application/json"), body, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var t struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &t); err != nil || t.Secret == "" {
		return "", fmt.Errorf("create token: no secret in %.200s", b)
	}
	return t.Secret, nil
}

// hostileBody is one body of the hostile-bodies group.
type hostileBody struct {
	name, contentType string
	raw               []byte
}

// hostileBodies are the shapes, each of the largest size accepted
// (margo.MaxDescriptionSize, give or take a few bytes).
func hostileBodies() []hostileBody {
	const size = margo.MaxDescriptionSize
	fill := func(prefix, item, sep, suffix string) []byte {
		n := (size - len(prefix) - len(suffix)) / (len(item) + len(sep))
		return []byte(prefix + strings.Repeat(item+sep, n-1) + item + suffix)
	}
	// pad fills a YAML document up to size with a comment.
	pad := func(doc string) []byte {
		return []byte(doc + "# " + strings.Repeat("x", size-len(doc)-3) + "\n")
	}
	keys := func(format, open, closing string) []byte {
		var b strings.Builder
		b.WriteString(open)
		for i := 0; b.Len() < size-40; i++ {
			fmt.Fprintf(&b, format, i)
		}
		return []byte(strings.TrimSuffix(b.String(), ",") + closing)
	}
	var bomb strings.Builder
	bomb.WriteString("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	prev := "a"
	for i := range 8 {
		n := string(rune('b' + i))
		fmt.Fprintf(&bomb, "%s: &%s [%s]\n", n, n, strings.TrimSuffix(strings.Repeat("*"+prev+", ", 10), ", "))
		prev = n
	}
	under := margo.MaxNodes - 100 // items of a list just under the node limit
	long := strings.Repeat("x", size-20)
	const y, j = "application/yaml", "application/json"
	return slices.Clip([]hostileBody{
		{"YAML flat list", y, fill("big: [", "1", ",", "]\n")},
		{"YAML block list", y, fill("big:\n", "- 1", "\n", "\n")},
		{"YAML many keys", y, keys("k%d: 1\n", "", "")},
		{"YAML deep nesting", y, []byte("a: " + strings.Repeat("[", size/2-10) + strings.Repeat("]", size/2-10) + "\n")},
		{"YAML alias bomb", y, pad(bomb.String())},
		{"YAML list under the node limit", y, pad("big: [" + strings.Repeat("1,", under) + "1]\n")},
		{"YAML long string", y, []byte("s: " + long + "\n")},
		{"JSON flat list", j, fill(`{"big":[`, "1", ",", "]}")},
		{"JSON many keys", j, keys(`"k%d":1,`, "{", "}")},
		{"JSON deep nesting", j, []byte(`{"a":` + strings.Repeat("[", size/2-10) + strings.Repeat("]", size/2-10) + "}")},
		{"JSON list under the node limit", j, []byte(`{"big":[` + strings.Repeat("1,", under) + `1],"pad":"` + strings.Repeat("x", size-2*under-40) + `"}`)},
		{"JSON long string", j, []byte(`{"s":"` + long + `"}`)},
	})
}
