package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/wfm-dev/wfm/internal/lifecycle"
)

// copyRowsMin is the number of rows from which apply inserts a table's new
// rows of a round with COPY rather than with its set-based statement (as
// for events: copyEventsMin). Below it, the statement in the pipeline
// costs less than COPY's extra round trips.
const copyRowsMin = 256

// pipeline is what apply sends, in order: pipelined statements (pgx.Batch)
// and, between them, COPYs of large inserts. A COPY cannot be pipelined:
// the statements queued before it are sent and their results read, then
// the COPY runs, then a new batch starts. A handful of round trips per
// batch, whatever its size.
type pipeline struct {
	steps []pipelineStep
}

type pipelineStep struct {
	batch *pgx.Batch
	copy  *copyStep
}

// copyStep is one COPY: rows into table's columns; check judges the
// result (the row count, or the error).
type copyStep struct {
	table   string
	columns []string
	rows    [][]any
	check   func(n int64, err error) error
}

// q returns the batch that statements are queued on now.
func (p *pipeline) q() *pgx.Batch {
	if len(p.steps) == 0 || p.steps[len(p.steps)-1].batch == nil {
		p.steps = append(p.steps, pipelineStep{batch: &pgx.Batch{}})
	}
	return p.steps[len(p.steps)-1].batch
}

// copy appends a COPY after the statements queued so far.
func (p *pipeline) copy(table string, columns []string, rows [][]any, check func(n int64, err error) error) {
	p.steps = append(p.steps, pipelineStep{copy: &copyStep{table: table, columns: columns, rows: rows, check: check}})
}

// run sends the pipeline in tx, in order; it stops at the first failure.
func (p *pipeline) run(ctx context.Context, tx pgx.Tx) error {
	for _, s := range p.steps {
		if s.batch != nil {
			if s.batch.Len() == 0 {
				continue
			}
			if err := tx.SendBatch(ctx, s.batch).Close(); err != nil {
				return err
			}
			continue
		}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{s.copy.table}, s.copy.columns, pgx.CopyFromRows(s.copy.rows))
		if err := s.copy.check(n, err); err != nil {
			return err
		}
	}
	return nil
}

// copyCount is a copyStep check: exactly want rows, else errGuard.
func copyCount(table string, want int) func(int64, error) error {
	return func(n int64, err error) error {
		if err != nil {
			return fmt.Errorf("copy %s: %w", table, err)
		}
		if n != int64(want) {
			return fmt.Errorf("%d %s rows inserted as %d", want, table, n)
		}
		return nil
	}
}

// rowsOf returns a's rows, each made by row from the column values.
func rowsOf(a cols, row func(v []any) []any) [][]any {
	out := make([][]any, a.n)
	v := make([]any, len(a.cols))
	for i := range a.n {
		for j := range a.cols {
			v[j] = a.cols[j][i]
		}
		out[i] = row(v)
	}
	return out
}

// nullIf returns nil when v is its type's zero value (the statements'
// NULLIF), else v.
func nullIf[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// copyUUID is a uuid in its text form, as a COPY value. pgx encodes a Go
// string into a binary uuid only after failing to (an error formatted per
// value) and parsing it as text: most of the time of encoding a COPY of
// creations (BenchmarkCreateBatch10000's profile). This encodes it at once.
type copyUUID string

// UUIDValue implements pgtype.UUIDValuer.
func (u copyUUID) UUIDValue() (pgtype.UUID, error) {
	var v pgtype.UUID
	err := v.Scan(string(u))
	return v, err
}

// asUUID is a uuid column's COPY value: a string as a copyUUID, anything
// else (nil) as it is.
func asUUID(v any) any {
	if s, ok := v.(string); ok {
		return copyUUID(s)
	}
	return v
}

// secondsInterval is make_interval(secs => s): microseconds, no days or
// months.
func secondsInterval(s float64) pgtype.Interval {
	return pgtype.Interval{Microseconds: int64(math.Round(s * 1e6)), Valid: true}
}

// errOperationUnique translates a unique violation of the one-active-operation
// index on inserting operations of deployments.
func errOperationUnique(err error, deployments []string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" { // a concurrent request won the one-active-operation index
		if len(deployments) == 1 {
			return operationInProgress(deployments[0], "")
		}
		return &lifecycle.Error{Code: lifecycle.ECONFLICT, Type: "operation-in-progress",
			Message: "A deployment of the batch already has an operation in progress."}
	}
	return err
}
