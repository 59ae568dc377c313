package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/walcast/walcast/host/internal/config"
)

// kafkaTopics are the topics a kafka sink writes: one per table it
// receives, and with eos its checkpoint topic. walcast validate --source
// shows them before the first run; walcast teardown names them as what it
// leaves (they live in Kafka, which walcast never deletes from).
type kafkaTopics struct {
	// Tables maps each table ("schema.table") to its topic, in the
	// order the sink receives them.
	Tables     []tableTopic
	Checkpoint string // "" with eos = false
	// TransactionalID keys the sink's checkpoint record (eos only).
	TransactionalID string
}

type tableTopic struct{ Table, Topic string }

// kafkaSinkConfig is the part of the kafka sink's config block that names
// topics (plugins/kafka config.go, whose defaults these are).
type kafkaSinkConfig struct {
	TopicPrefix     string            `json:"topic_prefix"`
	Topics          map[string]string `json:"topics"`
	EOS             *bool             `json:"eos"`
	TransactionalID string            `json:"transactional_id"`
	CheckpointTopic string            `json:"checkpoint_topic"`
}

// topicsOf decodes sink s's config block (a kafka sink) with the
// attributes its plugin declares and names its topics the way the plugin
// does (plugins/kafka topicname.go; TestPlanKafkaTopicsAreTheSinks
// compares both against a broker).
func topicsOf(ctx context.Context, p *config.Pipeline, s *config.Sink, plugins config.PluginChecker) (kafkaTopics, error) {
	info, err := plugins.Describe(ctx, s.Type)
	if err != nil {
		return kafkaTopics{}, err
	}
	raw, diags := config.DecodeSinkConfig(s.Config, info.Config)
	if diags.HasErrors() {
		return kafkaTopics{}, fmt.Errorf("decode the config of sink %s: %s", s.ID, diags.Error())
	}
	var c kafkaSinkConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return kafkaTopics{}, fmt.Errorf("decode the config of sink %s: %w", s.ID, err)
	}
	prefix := cmp.Or(c.TopicPrefix, "walcast")
	var out kafkaTopics
	for _, t := range config.SinkTables(&p.Source, s) {
		topic, ok := c.Topics[t]
		if !ok {
			schema, table, _ := strings.Cut(t, ".")
			topic = prefix + "." + topicChars(schema) + "." + topicChars(table)
		}
		out.Tables = append(out.Tables, tableTopic{Table: t, Topic: topic})
	}
	if c.EOS == nil || *c.EOS {
		out.Checkpoint = cmp.Or(c.CheckpointTopic, "walcast.checkpoints")
		out.TransactionalID = cmp.Or(c.TransactionalID, "walcast-"+s.ID)
	}
	return out, nil
}

// topicChars replaces each character Kafka does not allow in a topic name
// with "_", as the kafka sink does.
func topicChars(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// String is the topics in one line: "public.orders → walcast.public.orders,
// …; checkpoint topic walcast.checkpoints (record walcast-stream)".
func (k kafkaTopics) String() string {
	parts := make([]string, len(k.Tables))
	for i, t := range k.Tables {
		parts[i] = t.Table + " → " + t.Topic
	}
	s := "topics " + strings.Join(parts, ", ")
	if k.Checkpoint != "" {
		s += fmt.Sprintf("; checkpoint topic %s (record %s)", k.Checkpoint, k.TransactionalID)
	}
	return s
}
