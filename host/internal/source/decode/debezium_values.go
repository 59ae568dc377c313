package decode

import (
	"encoding/base64"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// dbzType is how a column's text form becomes a Debezium value: Kafka
// Connect's literal type plus, for most, a semantic type (schema name).
// The mapping follows Debezium's PostgreSQL connector documentation
// ("Data type mappings") with time.precision.mode=adaptive,
// interval.handling.mode=numeric and binary.handling.mode=bytes.
type dbzType uint8

const (
	dzString dbzType = iota // text types and everything not listed below
	dzBool
	dzInt16
	dzInt32
	dzInt64
	dzFloat32
	dzFloat64
	dzBytes
	dzJSON // io.debezium.data.Json: the document as a string
	dzUUID
	dzXML
	dzDecimal    // precise, scale from the type modifier
	dzVarDecimal // precise, numeric without a scale
	dzNumDouble  // decimal.handling.mode=double
	dzNumString  // decimal.handling.mode=string
	dzDate
	dzTime      // time(0..3): milliseconds past midnight
	dzMicroTime // time(4..6), time
	dzTimestamp // timestamp(0..3): milliseconds since the epoch
	dzMicroTimestamp
	dzZonedTimestamp
	dzZonedTime
	dzInterval // io.debezium.time.MicroDuration
	dzArray    // elements as the envelope writes them
)

// OIDs pgtype does not name.
const (
	oidMoney = 790
	oidXML   = 142
)

// moneyScale is Debezium's money.fraction.digits default.
const moneyScale = 2

// dbzColumn is one column of a table in the debezium format.
type dbzColumn struct {
	typ dbzType
	// money: the column is money, whose text has a currency symbol and
	// group separators to strip before it reads as a number.
	money bool
	// scale and precision of a dzDecimal; precision (0..6) of a time or
	// timestamp, -1 when the type has none.
	scale, precision int
}

// dbzColumnFor maps a column's type and type modifier under decimal mode dm.
func dbzColumnFor(oid uint32, typmod int32, dm string) dbzColumn {
	prec := -1
	if typmod >= 0 {
		prec = int(typmod)
	}
	switch oid {
	case pgtype.BoolOID:
		return dbzColumn{typ: dzBool}
	case pgtype.BitOID:
		if typmod == 1 {
			return dbzColumn{typ: dzBool}
		}
	case pgtype.Int2OID:
		return dbzColumn{typ: dzInt16}
	case pgtype.Int4OID:
		return dbzColumn{typ: dzInt32}
	case pgtype.Int8OID, pgtype.OIDOID:
		return dbzColumn{typ: dzInt64}
	case pgtype.Float4OID:
		return dbzColumn{typ: dzFloat32}
	case pgtype.Float8OID:
		return dbzColumn{typ: dzFloat64}
	case pgtype.ByteaOID:
		return dbzColumn{typ: dzBytes}
	case pgtype.JSONOID, pgtype.JSONBOID:
		return dbzColumn{typ: dzJSON}
	case pgtype.UUIDOID:
		return dbzColumn{typ: dzUUID}
	case oidXML:
		return dbzColumn{typ: dzXML}
	case pgtype.NumericOID, oidMoney:
		c := dbzColumn{money: oid == oidMoney, scale: moneyScale, precision: -1}
		switch {
		case dm == DecimalDouble:
			c.typ = dzNumDouble
		case dm == DecimalString:
			c.typ = dzNumString
		case oid == oidMoney:
			c.typ = dzDecimal
		case typmod >= 4:
			c.typ = dzDecimal
			c.precision, c.scale = int((typmod-4)>>16)&0xffff, int(typmod-4)&0xffff
		default:
			c.typ = dzVarDecimal
		}
		return c
	case pgtype.DateOID:
		return dbzColumn{typ: dzDate}
	case pgtype.TimeOID:
		if prec >= 0 && prec <= 3 {
			return dbzColumn{typ: dzTime, precision: prec}
		}
		return dbzColumn{typ: dzMicroTime, precision: prec}
	case pgtype.TimestampOID:
		if prec >= 0 && prec <= 3 {
			return dbzColumn{typ: dzTimestamp, precision: prec}
		}
		return dbzColumn{typ: dzMicroTimestamp, precision: prec}
	case pgtype.TimestamptzOID:
		return dbzColumn{typ: dzZonedTimestamp, precision: prec}
	case pgtype.TimetzOID:
		return dbzColumn{typ: dzZonedTime, precision: prec}
	case pgtype.IntervalOID:
		return dbzColumn{typ: dzInterval}
	}
	if lookupType(oid).array {
		return dbzColumn{typ: dzArray}
	}
	return dbzColumn{typ: dzString}
}

// appendDbzValue appends the value of one non-NULL column. Like the
// envelope it never fails: a value its type cannot express (a BC date, a
// numeric NaN in precise mode) falls back to what docs/formats.md says.
func (d *Decoder) appendDbzValue(b []byte, c *dbzColumn, col *column, text []byte) []byte {
	switch c.typ {
	case dzBool:
		if len(text) == 1 && (text[0] == 't' || text[0] == '1') {
			return append(b, "true"...)
		}
		if len(text) == 1 && (text[0] == 'f' || text[0] == '0') {
			return append(b, "false"...)
		}
	case dzInt16, dzInt32, dzInt64, dzFloat32, dzFloat64:
		if isJSONNumber(text) {
			return append(b, text...)
		}
	case dzBytes:
		if out, ok := appendByteaBase64(b, text); ok {
			return out
		}
	case dzDecimal, dzVarDecimal, dzNumDouble, dzNumString:
		return appendDbzDecimal(b, c, text)
	case dzDate:
		if t, ok := parseDate(text); ok {
			return strconv.AppendInt(b, t.Unix()/86400, 10)
		}
	case dzTime, dzMicroTime:
		if us, ok := parseClock(text); ok {
			if c.typ == dzTime {
				us /= 1000
			}
			return strconv.AppendInt(b, us, 10)
		}
	case dzTimestamp, dzMicroTimestamp:
		return appendDbzTimestamp(b, c, text)
	case dzZonedTimestamp:
		return appendZonedTimestamp(b, c, text)
	case dzZonedTime:
		if out, ok := appendZonedTime(b, text); ok {
			return out
		}
	case dzInterval:
		if us, ok := parseInterval(text); ok {
			return strconv.AppendInt(b, us, 10)
		}
	case dzArray:
		return d.appendColumnText(b, col, text)
	}
	return appendJSONString(b, text)
}

// appendColumnText appends a value as the envelope writes it.
func (d *Decoder) appendColumnText(b []byte, col *column, text []byte) []byte {
	if col.typ.array {
		kind := col.typ.kind
		if kind == kindJSON || kind == kindTimestamp || kind == kindTimestampTZ {
			kind = kindText // Debezium's Json is a string; see docs/formats.md for timestamps
		}
		out, scratch, ok := appendArray(b, text, kind, d.scratch)
		d.scratch = scratch
		if ok {
			return out
		}
	}
	return appendJSONString(b, text)
}

// appendDbzDecimal appends a numeric or money value in the column's mode.
func appendDbzDecimal(b []byte, c *dbzColumn, text []byte) []byte {
	if c.money {
		text = moneyDigits(text)
	}
	switch c.typ {
	case dzNumString:
		return appendJSONString(b, text)
	case dzNumDouble:
		if isJSONNumber(text) {
			return append(b, text...)
		}
		return appendJSONString(b, text) // NaN, Infinity, -Infinity
	}
	scale := c.scale
	if c.typ == dzVarDecimal {
		if _, frac, ok := splitDecimal(text); ok {
			scale = len(frac)
		}
	}
	if c.typ == dzVarDecimal {
		mark := len(b)
		b = append(b, `{"scale":`...)
		b = strconv.AppendInt(b, int64(scale), 10)
		b = append(b, `,"value":"`...)
		out, ok := appendUnscaled(b, text, scale)
		if !ok {
			return append(b[:mark], "null"...) // NaN and ±Infinity have no Decimal
		}
		return append(out, `"}`...)
	}
	b = append(b, '"')
	out, ok := appendUnscaled(b, text, scale)
	if !ok {
		return append(b[:len(b)-1], "null"...)
	}
	return append(out, '"')
}

// moneyDigits strips a money value's currency symbol and group separators
// ("-$1,234.56" → "-1234.56"), keeping digits, sign and the decimal point.
func moneyDigits(text []byte) []byte {
	out := make([]byte, 0, len(text))
	for _, c := range text {
		if c >= '0' && c <= '9' || c == '-' || c == '.' {
			out = append(out, c)
		}
	}
	return out
}

// splitDecimal splits "-123.45" into its integer digits (sign kept) and
// fraction digits.
func splitDecimal(text []byte) (intPart, frac []byte, ok bool) {
	i := 0
	if i < len(text) && (text[i] == '-' || text[i] == '+') {
		i++
	}
	j := skipDigits(text, i)
	if j == i {
		return nil, nil, false
	}
	intPart = text[:j]
	if j == len(text) {
		return intPart, nil, true
	}
	if text[j] != '.' {
		return nil, nil, false
	}
	k := skipDigits(text, j+1)
	if k != len(text) {
		return nil, nil, false
	}
	return intPart, text[j+1:], true
}

// appendUnscaled appends, base64-encoded, the value times 10^scale as
// Java's BigInteger.toByteArray gives it (big-endian two's complement,
// shortest form): what Kafka Connect's Decimal carries. Extra fraction
// digits are cut (PostgreSQL pads a numeric(p,s) to s digits, so there
// are none).
func appendUnscaled(b, text []byte, scale int) ([]byte, bool) {
	intPart, frac, ok := splitDecimal(text)
	if !ok {
		return b, false
	}
	neg := intPart[0] == '-'
	if neg || intPart[0] == '+' {
		intPart = intPart[1:]
	}
	// Up to 18 digits fit an int64: no allocation.
	if len(intPart)+scale <= 18 {
		var v int64
		for _, c := range intPart {
			v = v*10 + int64(c-'0')
		}
		for i := range scale {
			v *= 10
			if i < len(frac) {
				v += int64(frac[i] - '0')
			}
		}
		if neg {
			v = -v
		}
		var buf [8]byte
		return base64.StdEncoding.AppendEncode(b, twosComplement64(&buf, v)), true
	}
	digits := make([]byte, 0, len(intPart)+scale+1)
	if neg {
		digits = append(digits, '-')
	}
	digits = append(digits, intPart...)
	for i := range scale {
		if i < len(frac) {
			digits = append(digits, frac[i])
		} else {
			digits = append(digits, '0')
		}
	}
	var n big.Int
	if _, ok := n.SetString(string(digits), 10); !ok {
		return b, false
	}
	return base64.StdEncoding.AppendEncode(b, twosComplementBig(&n)), true
}

// twosComplement64 writes v into buf and returns its shortest two's
// complement form.
func twosComplement64(buf *[8]byte, v int64) []byte {
	for i := range 8 {
		buf[7-i] = byte(v >> (8 * i))
	}
	// Drop leading bytes that only repeat the sign.
	i := 0
	for i < 7 && (buf[i] == 0x00 && buf[i+1]&0x80 == 0 || buf[i] == 0xff && buf[i+1]&0x80 != 0) {
		i++
	}
	return buf[i:]
}

func twosComplementBig(n *big.Int) []byte {
	if n.Sign() >= 0 {
		b := n.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -n = ^(n-1): the magnitude minus one, bits inverted.
	m := new(big.Int).Neg(n)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	if len(b) == 0 || b[0]&0x80 != 0 {
		b = append([]byte{0}, b...)
	}
	for i := range b {
		b[i] = ^b[i]
	}
	return b
}

// parseDate reads "YYYY-MM-DD" (DateStyle ISO) as midnight UTC.
func parseDate(text []byte) (time.Time, bool) {
	t, err := time.Parse(time.DateOnly, string(text))
	return t, err == nil
}

// parseClock reads "HH:MM:SS[.ffffff]" (24:00:00 included) as microseconds
// past midnight.
func parseClock(text []byte) (int64, bool) {
	if len(text) < 8 || text[2] != ':' || text[5] != ':' {
		return 0, false
	}
	var us int64
	for _, part := range [][2]int{{0, 3600}, {3, 60}, {6, 1}} {
		v, ok := twoDigits(text[part[0]:])
		if !ok {
			return 0, false
		}
		us += int64(v*part[1]) * 1_000_000
	}
	rest := text[8:]
	if len(rest) == 0 {
		return us, true
	}
	if rest[0] != '.' || len(rest) > 7 || skipDigits(rest, 1) != len(rest) || len(rest) == 1 {
		return 0, false
	}
	frac := 0
	for i := 1; i <= 6; i++ {
		frac *= 10
		if i < len(rest) {
			frac += int(rest[i] - '0')
		}
	}
	return us + int64(frac), true
}

func twoDigits(s []byte) (int, bool) {
	if len(s) < 2 || s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9' {
		return 0, false
	}
	return int(s[0]-'0')*10 + int(s[1]-'0'), true
}

// Debezium's values for timestamp 'infinity' and '-infinity' (its
// documentation, "TIMESTAMP type").
const (
	dbzPlusInfinity  = 9223372036825200000
	dbzMinusInfinity = -9223372036832400000
)

// appendDbzTimestamp appends a timestamp as microseconds (or
// milliseconds) since the epoch, the wall-clock time read as UTC.
func appendDbzTimestamp(b []byte, c *dbzColumn, text []byte) []byte {
	switch string(text) {
	case "infinity":
		return strconv.AppendInt(b, dbzPlusInfinity, 10)
	case "-infinity":
		return strconv.AppendInt(b, dbzMinusInfinity, 10)
	}
	if len(text) < 19 || text[10] != ' ' {
		return appendJSONString(b, text)
	}
	day, ok := parseDate(text[:10])
	us, ok2 := parseClock(text[11:])
	if !ok || !ok2 {
		return appendJSONString(b, text)
	}
	v := day.Unix()*1_000_000 + us
	if c.typ == dzTimestamp {
		v = floorDiv(v, 1000)
	}
	return strconv.AppendInt(b, v, 10)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// appendZonedTimestamp appends a timestamptz as Debezium's ZonedTimestamp:
// ISO 8601 in UTC, with as many fractional digits as the column's
// precision, or as few as the value needs when the column has none.
func appendZonedTimestamp(b []byte, c *dbzColumn, text []byte) []byte {
	switch string(text) {
	case "infinity", "-infinity":
		return appendJSONString(b, text)
	}
	mark := len(b)
	out, ok := appendTimestamp(b, text, true)
	if !ok {
		return appendJSONString(b[:mark], text)
	}
	// out ends with `.ffffffZ"`; cut the fraction to the precision.
	dot := len(out) - 9
	frac := out[dot+1 : dot+7]
	keep := c.precision
	if keep < 0 || keep > 6 {
		keep = 6
		for keep > 0 && frac[keep-1] == '0' {
			keep--
		}
	}
	cut := dot + 1 + keep
	if keep == 0 {
		cut = dot
	}
	out = append(out[:cut], `Z"`...)
	return out
}

// appendZonedTime appends a timetz ("HH:MM:SS[.ffffff]+HH[:MM[:SS]]") as
// Debezium's ZonedTime: the time in UTC, ISO 8601, as few fractional
// digits as the value needs.
func appendZonedTime(b []byte, text []byte) ([]byte, bool) {
	i := len(text) - 1
	for i > 0 && text[i] != '+' && text[i] != '-' {
		i--
	}
	if i < 8 {
		return b, false
	}
	us, ok := parseClock(text[:i])
	off, ok2 := parseOffset(text[i:])
	if !ok || !ok2 {
		return b, false
	}
	const day = 86400 * 1_000_000
	us = ((us-int64(off)*1_000_000)%day + day) % day
	t := time.UnixMicro(us).UTC()
	b = append(b, '"')
	b = t.AppendFormat(b, "15:04:05.999999")
	return append(b, `Z"`...), true
}

// daysPerMonth is the month length Debezium's MicroDuration assumes.
const daysPerMonth = 365.25 / 12.0

// parseInterval reads an interval in PostgreSQL's default output style
// ("1 year 2 mons -3 days 04:05:06.789") as Debezium's MicroDuration
// computes it: months of 365.25/12 days.
func parseInterval(text []byte) (int64, bool) {
	var years, months, days float64
	var clock int64
	fields := splitSpaces(text)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) >= 8 && (f[len(f)-3] == ':' || bytesContains(f, ':')) {
			neg := f[0] == '-'
			if neg || f[0] == '+' {
				f = f[1:]
			}
			us, ok := parseLongClock(f)
			if !ok {
				return 0, false
			}
			if neg {
				us = -us
			}
			clock += us
			continue
		}
		if i+1 >= len(fields) {
			return 0, false
		}
		n, err := strconv.ParseFloat(string(f), 64)
		if err != nil {
			return 0, false
		}
		i++
		switch string(fields[i]) {
		case "year", "years":
			years += n
		case "mon", "mons":
			months += n
		case "day", "days":
			days += n
		default:
			return 0, false
		}
	}
	totalDays := (years*12+months)*daysPerMonth + days
	secs := totalDays * 86400
	v := secs*1e6 + float64(clock)
	if math.IsNaN(v) || math.Abs(v) > math.MaxInt64/2 {
		return 0, false
	}
	return int64(v), true
}

// parseLongClock reads "H+:MM:SS[.ffffff]" (hours may exceed 24).
func parseLongClock(f []byte) (int64, bool) {
	h := skipDigits(f, 0)
	if h == 0 || h+6 > len(f) || f[h] != ':' {
		return 0, false
	}
	hours, err := strconv.ParseInt(string(f[:h]), 10, 64)
	if err != nil {
		return 0, false
	}
	rest := append([]byte("00"), f[h:]...)
	us, ok := parseClock(rest)
	if !ok {
		return 0, false
	}
	return hours*3600*1_000_000 + us, true
}

func splitSpaces(s []byte) [][]byte {
	var out [][]byte
	start := -1
	for i, c := range s {
		if c == ' ' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

func bytesContains(s []byte, c byte) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}
