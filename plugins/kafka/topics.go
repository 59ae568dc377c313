package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walcast/walcast/pluginkit"
)

// ensureTopics makes sure every topic exists, creating the missing ones
// when create_topics allows it. The checkpoint topic is created compacted
// with one partition: it holds one live record per transactional id and is
// read from the start on every Open. Creation races with other writers are
// fine: a topic that already exists is what we wanted.
func (s *Sink) ensureTopics(ctx context.Context, c *conn, topics []string, checkpoint bool) error {
	st := s.cfg
	details, err := c.adm.ListTopics(ctx, topics...)
	if err != nil {
		return s.classify(fmt.Sprintf("look up topics %v", topics), err)
	}
	var missing []string
	for _, t := range topics {
		d, ok := details[t]
		switch {
		case ok && d.Err == nil:
			s.topics[t] = true
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			missing = append(missing, t)
		default:
			return s.classify("look up topic "+t, d.Err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !st.create {
		return pluginkit.Retryable(fmt.Errorf("topics %v do not exist and create_topics.enabled is false: create them, or enable create_topics", missing))
	}
	partitions, configs := st.partitions, map[string]*string(nil)
	if checkpoint {
		partitions = 1
		configs = map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	}
	resp, err := c.adm.CreateTopics(ctx, partitions, st.replication, configs, missing...)
	if err != nil {
		return s.classify(fmt.Sprintf("create topics %v", missing), err)
	}
	for _, t := range missing {
		r, ok := resp[t]
		if !ok {
			return pluginkit.Retryable(fmt.Errorf("create topic %s: no answer for it", t))
		}
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return s.classify("create topic "+t, r.Err)
		}
		s.topics[t] = true
		if r.Err == nil {
			s.log.Info("created topic", "topic", t, "partitions", r.NumPartitions, "replication_factor", r.ReplicationFactor, "compacted", checkpoint)
		}
	}
	return nil
}
