package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TicketsBucket is the key-value bucket of tickets (POST /tickets) that
// every replica redeems: values live for the ticket lifetime (the bucket's
// TTL), and a redeem deletes at the revision it read, so that a ticket
// works once whichever replicas it is brought to.
const TicketsBucket = "aiod_tickets"

// Tickets is the cluster's ticket store (guard.SharedTickets).
type Tickets struct {
	c  *Cluster
	kv jetstream.KeyValue
}

// Tickets opens (or makes) the tickets' bucket, whose entries live ttl.
func (c *Cluster) Tickets(ctx context.Context, ttl time.Duration) (*Tickets, error) {
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, err
	}
	kv, err := openOrMake(ctx, c.nc, "the tickets' bucket",
		func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, TicketsBucket) },
		func(ctx context.Context, replicas int) (jetstream.KeyValue, error) {
			return js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: TicketsBucket, Replicas: replicas, TTL: ttl,
				Description: "aiod: unused tickets, for any replica to redeem once"})
		})
	if err != nil {
		return nil, err
	}
	// A ticket is redeemed right after it is issued, often on another
	// replica: its read must see the write. A bucket's direct gets may be
	// answered by a replica of the stream that has not stored it yet (a
	// ticket refused under load), so this bucket's reads go to its leader.
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+TicketsBucket)
	if err != nil {
		return nil, err
	}
	if cfg := st.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, err
		}
		if kv, err = js.KeyValue(ctx, TicketsBucket); err != nil {
			return nil, err
		}
	}
	return &Tickets{c: c, kv: kv}, nil
}

// ticketTimeout bounds each call: a ticket is checked on a request's path.
const ticketTimeout = 3 * time.Second

func (t *Tickets) Put(key string, value []byte) error {
	ctx, cancel := context.WithTimeout(t.c.ctx, ticketTimeout)
	defer cancel()
	_, err := t.kv.Create(ctx, "k."+key, value)
	return err
}

func (t *Tickets) Peek(key string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(t.c.ctx, ticketTimeout)
	defer cancel()
	e, err := t.kv.Get(ctx, "k."+key)
	if err != nil {
		return nil, false
	}
	return e.Value(), true
}

func (t *Tickets) Take(key string) ([]byte, bool) {
	ctx, cancel := context.WithTimeout(t.c.ctx, ticketTimeout)
	defer cancel()
	e, err := t.kv.Get(ctx, "k."+key)
	if err != nil {
		return nil, false
	}
	// Deleted at the revision read: of two takes, the second fails.
	if err := t.kv.Delete(ctx, "k."+key, jetstream.LastRevision(e.Revision())); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.c.log.Debug("cluster: a ticket was taken by another replica first", "err", err)
		}
		return nil, false
	}
	return e.Value(), true
}
