package pipe

import (
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow/go/v17/arrow"
)

// checkArray checks that every buffer of an array decoded from untrusted
// bytes is large enough for its length and offset, and that variable-size
// offsets are monotone and inside their data, so that reading any value of
// the array cannot panic. Arrow Go has no general ValidateFull, so this
// covers the types checkType allows.
func checkArray(d arrow.ArrayData, depth int) error {
	if depth > maxNesting+1 {
		return fmt.Errorf("array nested too deeply")
	}
	off, n := int64(d.Offset()), int64(d.Len())
	if off < 0 || n < 0 {
		return fmt.Errorf("negative offset %d or length %d", off, n)
	}
	end := off + n
	bufs := d.Buffers()
	bufLen := func(i int) int64 {
		if i >= len(bufs) || bufs[i] == nil {
			return 0
		}
		return int64(bufs[i].Len())
	}
	bufBytes := func(i int) []byte {
		if i >= len(bufs) || bufs[i] == nil {
			return nil
		}
		return bufs[i].Bytes()
	}
	if _, isNull := d.DataType().(*arrow.NullType); !isNull && d.NullN() != 0 {
		if bufLen(0)*8 < end {
			return fmt.Errorf("validity bitmap of %d bytes is too short for %d rows", bufLen(0), end)
		}
	}
	children := d.Children()
	needChildren := func(k int) error {
		if len(children) != k {
			return fmt.Errorf("%s array has %d child arrays, want %d", d.DataType(), len(children), k)
		}
		return nil
	}
	switch t := d.DataType().(type) {
	case *arrow.NullType:
		return nil
	case *arrow.BooleanType:
		if bufLen(1)*8 < end {
			return fmt.Errorf("boolean values of %d bytes are too short for %d rows", bufLen(1), end)
		}
	case *arrow.StringType, *arrow.BinaryType:
		return checkOffsets32(bufBytes(1), off, n, bufLen(2))
	case *arrow.LargeStringType, *arrow.LargeBinaryType:
		return checkOffsets64(bufBytes(1), off, n, bufLen(2))
	case *arrow.ListType, *arrow.MapType:
		if err := needChildren(1); err != nil {
			return err
		}
		if err := checkOffsets32(bufBytes(1), off, n, int64(children[0].Len())); err != nil {
			return err
		}
		return checkArray(children[0], depth+1)
	case *arrow.LargeListType:
		if err := needChildren(1); err != nil {
			return err
		}
		if err := checkOffsets64(bufBytes(1), off, n, int64(children[0].Len())); err != nil {
			return err
		}
		return checkArray(children[0], depth+1)
	case *arrow.FixedSizeListType:
		if err := needChildren(1); err != nil {
			return err
		}
		size := int64(t.Len())
		if size < 0 {
			return fmt.Errorf("fixed size list of negative size %d", size)
		}
		if size > 0 && end > int64(children[0].Len())/size {
			return fmt.Errorf("fixed size list child of %d values is too short for %d rows of %d", children[0].Len(), end, size)
		}
		return checkArray(children[0], depth+1)
	case *arrow.StructType:
		if err := needChildren(t.NumFields()); err != nil {
			return err
		}
		for _, c := range children {
			if int64(c.Len()) < end {
				return fmt.Errorf("struct child of %d values is too short for %d rows", c.Len(), end)
			}
			if err := checkArray(c, depth+1); err != nil {
				return err
			}
		}
		return nil
	case arrow.FixedWidthDataType:
		bits := int64(t.BitWidth())
		if bits <= 0 {
			return fmt.Errorf("type %s has no width", t)
		}
		if end > bufLen(1)*8/bits {
			return fmt.Errorf("values of %d bytes are too short for %d rows of %s", bufLen(1), end, t)
		}
	default:
		return fmt.Errorf("type %s is not allowed in pipe version %s", t, Version)
	}
	return nil
}

func checkOffsets32(b []byte, off, n, dataLen int64) error {
	if n == 0 {
		return nil
	}
	if int64(len(b))/4 < off+n+1 {
		return fmt.Errorf("offsets buffer of %d bytes is too short for %d rows", len(b), off+n)
	}
	prev := int64(int32(binary.LittleEndian.Uint32(b[4*off:])))
	if prev < 0 {
		return fmt.Errorf("negative value offset %d", prev)
	}
	for i := off + 1; i <= off+n; i++ {
		v := int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		if v < prev {
			return fmt.Errorf("value offsets decrease at row %d (%d after %d)", i-off-1, v, prev)
		}
		prev = v
	}
	if prev > dataLen {
		return fmt.Errorf("value offset %d lies beyond the %d values", prev, dataLen)
	}
	return nil
}

func checkOffsets64(b []byte, off, n, dataLen int64) error {
	if n == 0 {
		return nil
	}
	if int64(len(b))/8 < off+n+1 {
		return fmt.Errorf("offsets buffer of %d bytes is too short for %d rows", len(b), off+n)
	}
	prev := int64(binary.LittleEndian.Uint64(b[8*off:]))
	if prev < 0 {
		return fmt.Errorf("negative value offset %d", prev)
	}
	for i := off + 1; i <= off+n; i++ {
		v := int64(binary.LittleEndian.Uint64(b[8*i:]))
		if v < prev {
			return fmt.Errorf("value offsets decrease at row %d (%d after %d)", i-off-1, v, prev)
		}
		prev = v
	}
	if prev > dataLen {
		return fmt.Errorf("value offset %d lies beyond the %d values", prev, dataLen)
	}
	return nil
}
