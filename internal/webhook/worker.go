package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/riverqueue/river"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// Queue is the River queue of deliveries.
const Queue = "webhooks"

// DeliveryArgs is a delivery job: one event to one subscription, with the
// event's per-subject sequence number, fixed when the job was queued so that
// retries and redeliveries send the same body.
type DeliveryArgs struct {
	WebhookID string `json:"webhookId"`
	EventID   int64  `json:"eventId"`
	Sequence  int64  `json:"sequence"`
}

// Kind implements river.JobArgs.
func (DeliveryArgs) Kind() string { return "webhook_delivery" }

// InsertOpts implements river.JobArgsWithInsertOpts: the webhooks queue,
// and attempts bounded by time (RetryWindow, see Worker.Work) rather than by
// count.
func (DeliveryArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 1000}
}

// DeliveryStore is what the worker needs of the store.
type DeliveryStore interface {
	// DeliveryTarget reads subscription id and its sealed secrets.
	// Returns ENOTFOUND when it was deleted.
	DeliveryTarget(ctx context.Context, id string) (Target, error)
	// Event reads event id. Returns ENOTFOUND when retention deleted it.
	Event(ctx context.Context, id int64) (lifecycle.Event, error)
	// RecordAttempt, in one transaction, locks attempt d's subscription,
	// calls decide with it, and writes the attempt, the subscription's new
	// failure run (and enabled flag and reason when the outcome disables
	// it) and the events decide returns. d.NextRetryAt is kept only when
	// the outcome retries. Returns ENOTFOUND when the subscription was
	// deleted.
	RecordAttempt(ctx context.Context, d Delivery,
		decide func(w Webhook) (lifecycle.WebhookOutcome, []lifecycle.Event, error)) (lifecycle.WebhookOutcome, error)
}

// WorkerConfig are the settings of the worker.
type WorkerConfig struct {
	// Timeout bounds each request, connection included (zero: 10 s).
	Timeout time.Duration
	// DisableAfter is the run of failed attempts that disables a
	// subscription (zero: DefaultDisableAfter).
	DisableAfter int
	// DisableAfterPeriod is how long that run must also have lasted (zero:
	// DefaultDisableAfterPeriod; negative: no minimum, for tests).
	DisableAfterPeriod time.Duration
	// Guard decides which addresses may be connected to.
	Guard Guard
	// Now is the clock (signatures, attempts, the rotation overlap).
	Now func() time.Time
	// Backoff is the wait after the attempt-th failed attempt of job id
	// (nil: Backoff; tests shorten it).
	Backoff func(id int64, attempt int) time.Duration
}

// Worker delivers DeliveryArgs jobs: it signs the event's body and POSTs it,
// records the attempt and applies lifecycle.DecideWebhookAttempt.
type Worker struct {
	river.WorkerDefaults[DeliveryArgs]
	store  DeliveryStore
	keys   *Keyring
	client *http.Client
	cfg    WorkerConfig
}

// maxResponseBody bounds what is read of a receiver's answer.
const maxResponseBody = 64 << 10

// NewWorker returns a worker on store that opens secrets with keys.
func NewWorker(store DeliveryStore, keys *Keyring, cfg WorkerConfig) *Worker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.DisableAfterPeriod == 0 {
		cfg.DisableAfterPeriod = DefaultDisableAfterPeriod
	}
	if cfg.DisableAfter <= 0 {
		cfg.DisableAfter = DefaultDisableAfter
	}
	if cfg.Backoff == nil {
		cfg.Backoff = Backoff
	}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would connect on our behalf, past the guard
		DialContext:           cfg.Guard.Dialer(cfg.Timeout).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
	}
	client := &http.Client{Transport: transport, Timeout: cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Worker{store: store, keys: keys, client: client, cfg: cfg}
}

// Timeout implements river.Worker: a job outlives its request's timeout by
// the time to record the attempt, half the timeout, so that it ends before
// RescueAfter: a delivery still running is never taken for one cut off by a
// crash.
func (w *Worker) Timeout(*river.Job[DeliveryArgs]) time.Duration {
	return w.cfg.Timeout + w.cfg.Timeout/2
}

// RescueAfter is RescueAfter of the worker's request timeout.
func (w *Worker) RescueAfter() time.Duration { return RescueAfter(w.cfg.Timeout) }

// NextRetry implements river.Worker: exponential backoff from 1 s, doubling,
// capped at an hour, with ±20% jitter derived from the job and attempt (so
// the attempt record shows, within the time to write it, the instant River
// uses), counted from the failure on River's clock (River ignores an
// instant already past).
func (w *Worker) NextRetry(job *river.Job[DeliveryArgs]) time.Time {
	return time.Now().Add(w.cfg.Backoff(job.ID, job.Attempt))
}

// Backoff is the wait after the attempt-th failed attempt of job id.
func Backoff(id int64, attempt int) time.Duration {
	d := time.Hour
	if attempt < 13 {
		d = min(time.Second<<max(attempt-1, 0), time.Hour)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(id))
	binary.BigEndian.PutUint64(b[8:], uint64(attempt))
	sum := sha256.Sum256(b[:])
	frac := float64(binary.BigEndian.Uint64(sum[:8])>>11) / float64(1<<53) // [0, 1)
	return time.Duration(float64(d) * (0.8 + 0.4*frac))
}

// Work implements river.Worker.
func (w *Worker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	a := job.Args
	t, err := w.store.DeliveryTarget(ctx, a.WebhookID)
	if lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND {
		return river.JobCancel(fmt.Errorf("webhook %s was deleted", a.WebhookID))
	}
	if err != nil {
		return err
	}
	if !t.Enabled {
		// Recorded as an attempt not sent, so that the delivery is listed
		// and can be redelivered once the subscription is enabled again.
		d := Delivery{WebhookID: a.WebhookID, EventID: a.EventID, Sequence: a.Sequence, Attempt: job.Attempt, At: w.cfg.Now().UTC(),
			Error: "not sent: the subscription is disabled"}
		_, err := w.store.RecordAttempt(ctx, d, unchangedRun)
		if err != nil && lifecycle.ErrorCode(err) != lifecycle.ENOTFOUND {
			return err
		}
		return river.JobCancel(fmt.Errorf("webhook %s is disabled", a.WebhookID))
	}
	start := w.cfg.Now()
	d := Delivery{WebhookID: a.WebhookID, EventID: a.EventID, Sequence: a.Sequence, Attempt: job.Attempt, At: start.UTC()}
	e, err := w.store.Event(ctx, a.EventID)
	var attempt lifecycle.WebhookAttempt
	switch {
	case lifecycle.ErrorCode(err) == lifecycle.ENOTFOUND:
		// Retention deleted it: not the receiver's failure.
		d.Error = "not sent: the event is no longer in the event log (retention)"
		if _, err := w.store.RecordAttempt(ctx, d, unchangedRun); err != nil && lifecycle.ErrorCode(err) != lifecycle.ENOTFOUND {
			return err
		}
		return river.JobCancel(errors.New(d.Error))
	case err != nil:
		return err
	default:
		attempt = w.send(ctx, t, e, a.Sequence, start)
	}
	d.Latency = max(w.cfg.Now().Sub(start), 0)
	d.StatusCode, d.Error = attempt.StatusCode, attempt.Err
	retryAt := w.cfg.Now().Add(w.cfg.Backoff(job.ID, job.Attempt))
	windowOver := retryAt.After(job.CreatedAt.Add(RetryWindow)) || err != nil
	if !windowOver {
		d.NextRetryAt = retryAt.UTC()
	}
	out, rerr := w.store.RecordAttempt(ctx, d, func(cur Webhook) (lifecycle.WebhookOutcome, []lifecycle.Event, error) {
		out := lifecycle.DecideWebhookAttempt(attempt, lifecycle.WebhookRun{Failures: cur.ConsecutiveFailures, Since: cur.FailingSince,
			DisableAfter: w.cfg.DisableAfter, DisableAfterPeriod: max(w.cfg.DisableAfterPeriod, 0)}, d.At)
		if !out.Disable || !cur.Enabled {
			return out, nil, nil
		}
		ev, err := lifecycle.NewEvent(d.At, "wfm", lifecycle.Ref{Kind: lifecycle.SubjectWebhook, ID: cur.ID},
			lifecycle.WebhookDisabledBody{Reason: out.Reason, ConsecutiveFailures: out.ConsecutiveFailures, LastError: attempt.Err})
		return out, []lifecycle.Event{ev}, err
	})
	if lifecycle.ErrorCode(rerr) == lifecycle.ENOTFOUND {
		return river.JobCancel(fmt.Errorf("webhook %s was deleted", a.WebhookID))
	}
	if rerr != nil {
		return rerr
	}
	switch {
	case out.Succeeded:
		return nil
	case out.Disable:
		// No line of its own: the webhook.disabled event committed with the
		// change is logged at WARN from the event log, with its reason.
		return river.JobCancel(errors.New(attempt.Err))
	case windowOver:
		return river.JobCancel(fmt.Errorf("%s; retried for %s, giving up", attempt.Err, RetryWindow))
	default:
		return errors.New(attempt.Err)
	}
}

// send POSTs event e (sequence seq) to t, signed at at, and returns what
// came back.
func (w *Worker) send(ctx context.Context, t Target, e lifecycle.Event, seq int64, at time.Time) lifecycle.WebhookAttempt {
	body, err := Body(e, seq)
	if err != nil {
		return lifecycle.WebhookAttempt{Err: err.Error()}
	}
	keys, err := w.signingKeys(t, at)
	if err != nil {
		return lifecycle.WebhookAttempt{Err: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return lifecycle.WebhookAttempt{Err: "bad URL: " + err.Error()}
	}
	id := strconv.FormatInt(e.ID, 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "wfm-webhooks")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	req.Header.Set(HeaderSignature, signature(keys, id, at, body))
	resp, err := w.client.Do(req)
	if err != nil {
		msg := err.Error()
		if len(msg) > 1000 {
			msg = msg[:1000]
		}
		return lifecycle.WebhookAttempt{Err: msg}
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxResponseBody)
	_ = resp.Body.Close()
	a := lifecycle.WebhookAttempt{StatusCode: resp.StatusCode}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Err = "receiver answered " + strconv.Itoa(resp.StatusCode)
	}
	return a
}

// signingKeys returns the HMAC keys that sign at at: the secret's, then the
// previous secret's while its overlap lasts.
func (w *Worker) signingKeys(t Target, at time.Time) ([][]byte, error) {
	secret, err := w.keys.open(t.ID, t.Secret)
	if err != nil {
		return nil, err
	}
	k, err := secretKey(secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{k}
	if t.PreviousSecret != nil && at.Before(t.PreviousUntil) {
		prev, err := w.keys.open(t.ID, t.PreviousSecret)
		if err != nil {
			return nil, err
		}
		pk, err := secretKey(prev)
		if err != nil {
			return nil, err
		}
		keys = append(keys, pk)
	}
	return keys, nil
}

// unchangedRun records an attempt that was not sent (its subscription is
// disabled, its event gone) without touching the subscription's run.
func unchangedRun(cur Webhook) (lifecycle.WebhookOutcome, []lifecycle.Event, error) {
	return lifecycle.WebhookOutcome{ConsecutiveFailures: cur.ConsecutiveFailures, FailingSince: cur.FailingSince}, nil, nil
}

// Body returns the JSON a delivery of e with sequence seq carries (the
// openapi WebhookEvent: the Event schema plus sequence), from the one
// conversion the event stream uses too (lifecycle.Event.WireJSON).
func Body(e lifecycle.Event, seq int64) ([]byte, error) { return e.WireJSON(seq) }
