package fleet

import "context"

type plannedKey struct{}

// WithPlanned returns ctx carrying f, which Upgrade, Reconfigure and
// Rollback call with their plan before they store the operation it plans
// (or refuse it). The HTTP adapter uses it to put what the plan decided (a
// break-glass override) in the call's audit entry, which the store writes
// in the operation's own transaction.
func WithPlanned(ctx context.Context, f func(Plan)) context.Context {
	return context.WithValue(ctx, plannedKey{}, f)
}

// planned calls the function WithPlanned put in ctx, if any.
func planned(ctx context.Context, p Plan) {
	if f, ok := ctx.Value(plannedKey{}).(func(Plan)); ok {
		f(p)
	}
}
