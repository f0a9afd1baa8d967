"""Types of the C extension record_columns.c (see its header comment)."""

class Block:
    """One finished column buffer (buffer protocol); its memory returns to the builder's pool when dropped."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

_VarColumn = tuple[Block | None, int, Block, Block]  # validity, null count, int32 offsets, data

class ColumnBuilder:
    """Arrow column buffers of the records of one Arrow batch."""

    rows: int

    def __len__(self) -> int: ...
    def append(self, section: bytes | bytearray | memoryview, record_count: int, base_offset: int,
               base_timestamp_ms: int, max_timestamp_ms: int, log_append: bool, position: int, end: int) -> None: ...
    def finish(self) -> tuple[int, Block, Block, Block, _VarColumn, _VarColumn, _VarColumn, _VarColumn,
                              _VarColumn]: ...
