package daemon

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/source/decode"
)

// formatVersion is what the debezium format writes in source.version.
const formatVersion = "walcast"

// sinkFormats lists the output formats the pipeline's sinks chose besides
// the envelope, each once however many sinks share it (the decoder writes
// each format in use once per event), and for each sink the queue format
// index: 0 for the envelope, i for formats[i-1].
func sinkFormats(p *config.Pipeline) (formats []decode.Format, index []int, err error) {
	index = make([]int, len(p.Sinks))
	var database string
	for i, s := range p.Sinks {
		if s.Format != config.FormatDebezium {
			continue
		}
		if database == "" {
			cfg, err := pgconn.ParseConfig(p.Source.DSN)
			if err != nil {
				return nil, nil, fmt.Errorf("read the database name for sink %s's debezium format from the source dsn: %w", s.ID, err)
			}
			database = cfg.Database
		}
		f := decode.Format{Name: decode.FormatDebezium, Debezium: decode.DebeziumOptions{
			Name:     s.Debezium.Name,
			Database: database,
			Version:  formatVersion,
			Schemas:  s.Debezium.Schemas,
			Decimal:  s.Debezium.DecimalHandling,
		}}
		at := slices.Index(formats, f)
		if at < 0 {
			formats = append(formats, f)
			at = len(formats) - 1
		}
		index[i] = at + 1
	}
	return formats, index, decode.CheckFormats(formats)
}
