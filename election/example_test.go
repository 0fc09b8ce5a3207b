package election_test

import (
	"context"
	"fmt"

	"github.com/dblock-go/dblock/dialect"
	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/exampledb"
)

// Campaign, read the leader, hand over.
func ExampleElection_Campaign() {
	db, cleanup := exampledb.Open("election.db")
	defer cleanup()
	ctx := context.Background()
	a, err := election.New(db, "primary", nil)
	if err != nil {
		panic(err)
	}
	defer a.Close()
	b, err := election.New(db, "primary", nil)
	if err != nil {
		panic(err)
	}
	defer b.Close()

	term, err := a.Campaign(ctx, "10.0.0.1:5000")
	if err != nil {
		panic(err)
	}
	leader, err := b.Leader(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("leader:", leader.Value, "term matches:", leader.Term == term.Token())

	wasLeader, err := a.Resign(ctx)
	fmt.Println("resigned:", wasLeader, err)
	next, err := b.Campaign(ctx, "10.0.0.2:5000")
	if err != nil {
		panic(err)
	}
	fmt.Println("next term is later:", next.Token() > term.Token())
	// Output:
	// leader: 10.0.0.1:5000 term matches: true
	// resigned: true <nil>
	// next term is later: true
}

// billingScheduler is the work of the package's doc example: it runs until
// its context ends.
type billingScheduler struct{ served chan<- string }

func (b billingScheduler) Serve(ctx context.Context) error {
	b.served <- "serving"
	<-ctx.Done()
	return nil
}

// lead is the package doc's example, as a function.
func lead(ctx context.Context, db *dialect.DB, hostname string, scheduler billingScheduler) error {
	e, err := election.New(db, "billing-scheduler", nil) // one per candidate
	if err != nil {
		return err
	}
	defer e.Close()
	return e.Run(ctx, hostname, func(ctx context.Context) error {
		return scheduler.Serve(ctx) // until shutdown, or until the term is lost
	})
}

// The package doc's example: lead until shutdown.
func Example() {
	db, cleanup := exampledb.Open("election.db")
	defer cleanup()
	ctx, shutdown := context.WithCancel(context.Background())
	served := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- lead(ctx, db, "replica-1", billingScheduler{served}) }()
	fmt.Println(<-served)
	shutdown()
	fmt.Println("lead returned:", <-done)
	// Output:
	// serving
	// lead returned: <nil>
}
