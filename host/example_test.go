package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Read the changes to a table and acknowledge them. The database needs
// wal_level = logical; the slot and the publication are created on first
// use, and later streams on the same slot resume after the last
// acknowledged transaction.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := os.Getenv("WALCAST_EXAMPLE_DSN")

	stream, err := host.Open(ctx, host.StreamConfig{
		DSN:    dsn,
		Tables: []string{"public.orders"},
		Slot:   "example_orders",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer stream.Close(context.Background())

	// Elsewhere, the application changes the table.
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close(ctx)
	_, err = db.Exec(ctx, `
		INSERT INTO orders VALUES (42, 'new', 19.90);
		UPDATE orders SET status = 'paid' WHERE id = 42;`)
	if err != nil {
		log.Fatal(err)
	}
	if _, err = db.Exec(ctx, `DELETE FROM orders WHERE id = 42`); err != nil {
		log.Fatal(err)
	}

	for range 3 {
		ev, err := stream.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if ev.Op == cdc.OpDelete {
			fmt.Printf("%s %s.%s key=%s\n", ev.Op, ev.Schema, ev.Table, ev.Key)
		} else {
			var order struct {
				ID     int    `json:"id"`
				Status string `json:"status"`
				Total  string `json:"total"` // numeric arrives as a string: no precision lost
			}
			if err := json.Unmarshal(ev.New, &order); err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s %s.%s key=%s -> %+v\n", ev.Op, ev.Schema, ev.Table, ev.Key, order)
		}
		// Ack once the change is handled. Acking a transaction's last
		// event lets the slot release the whole transaction.
		if err := stream.Ack(ev.ID); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// insert public.orders key={"id":42} -> {ID:42 Status:new Total:19.90}
	// update public.orders key={"id":42} -> {ID:42 Status:paid Total:19.90}
	// delete public.orders key={"id":42}
}
