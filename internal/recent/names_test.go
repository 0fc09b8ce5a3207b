package recent

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	var n Names
	if n.Within("a", time.Hour) {
		t.Fatal("an unmarked name is recent")
	}
	n.Mark("a")
	if !n.Within("a", time.Hour) || n.Within("a", 0) {
		t.Fatal("a marked name: Within(hour) false or Within(0) true")
	}
	n.Forget("a")
	if n.Within("a", time.Hour) {
		t.Fatal("a forgotten name is recent")
	}
	// Bounded: past Max names the memory starts over.
	for i := range Max + 1 {
		n.Mark(fmt.Sprint(i))
	}
	if n.Within("0", time.Hour) || !n.Within(fmt.Sprint(Max), time.Hour) {
		t.Fatal("the memory did not start over past Max")
	}
	if len(n.at) > Max {
		t.Fatalf("%d names remembered, bound %d", len(n.at), Max)
	}
}

// TestNamesConcurrent: marks, looks and forgets from many goroutines (run
// with -race); every goroutine's last mark stands.
func TestNamesConcurrent(t *testing.T) {
	var n Names
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				name := fmt.Sprint(g, "-", i%50)
				n.Mark(name)
				_ = n.Within(name, time.Second)
				if i%7 == 0 {
					n.Forget(name)
				}
			}
			n.Mark(fmt.Sprint(g, "-last"))
		}()
	}
	wg.Wait()
	for g := range 8 {
		if !n.Within(fmt.Sprint(g, "-last"), time.Hour) {
			t.Errorf("goroutine %d's last mark is lost", g)
		}
	}
}
