package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dblock-go/dblock/election"
	"github.com/dblock-go/dblock/internal/exampledb"
)

// One replica does the background work: Run campaigns, runs the work while
// this replica leads, and campaigns again if leadership is lost, until ctx
// ends.
func ExampleElection_Run() {
	db, cleanup := exampledb.Open("election.db")
	defer cleanup()
	e, err := election.New(db, "billing-scheduler", nil)
	if err != nil {
		panic(err)
	}
	defer e.Close()

	ctx, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	err = e.Run(ctx, "replica-1", func(ctx context.Context) error {
		fmt.Println("leading: scheduling billing runs")
		<-ctx.Done() // Until shutdown, or until the term is lost.
		return nil
	})
	fmt.Println("run returned:", err)
	// Output:
	// leading: scheduling billing runs
	// run returned: <nil>
}

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
