"""Start moto's server with transactions whose cost does not grow with the tables.

moto 5.2.1 rolls back a failed TransactWriteItems by deep-copying, before
every transaction, each whole table the transaction names. A local stack that
runs for days (demo local, make demo, long test runs) then gets slower
with every item it stores: a few thousand payments in, each transaction takes
tens of milliseconds, and batches hit the function's deadline guard. Real
DynamoDB's cost per transaction does not depend on table size.

This launcher imports moto, replaces that rollback with one that snapshots
only the items the transaction writes (a Put, Update or Delete names exactly
one key), and then runs the same server moto_server runs, with the same
flags:

    python3 launcher.py -H 127.0.0.1 -p 5000

The semantics stay moto's: the transaction itself is moto's own code, run
unchanged; only the copy it takes for its rollback is narrower. Any failure,
whether a condition that does not hold in one item, a validation error or
anything else, puts every item the transaction named back as it was, so a
transaction still writes all or nothing. A transaction on a table with a
stream, or one whose keys cannot be read up front, keeps moto's whole-table
copy, since its rollback must also cover what those touch. Like moto's own
rollback, it does not isolate transactions from concurrent writes to the
same items (DynamoDB would cancel one of them); unlike it, rolling back no
longer undoes concurrent writes to other items of the same tables.

The patch is written for, and tested against, the moto versions in
SUPPORTED_MOTO (the Makefile pins the one `make deps` installs). With any
other version, or when the code it patches is not where it expects, the
launcher runs plain moto and says so in one line on standard error (starting
with "lambdakit-moto:"); a second line, "lambdakit-moto: moto version X",
names the moto it found, from which the Go side warns about a version it does
not support. LAMBDAKIT_MOTO_PATCH=0 asks for plain moto on purpose (to
compare). Without moto importable from this Python, it runs moto_server from
PATH instead.

internal/motoserver embeds this file and feeds it to the Python that runs
moto_server; it is a file of its own so that it can be read, and run by
hand, as plain Python.
"""

import contextlib
import copy
import hashlib
import os
import sys
import threading
import time

# The moto versions whose TransactWriteItems this patch was written for and
# tested against (go test ./internal/motoserver/). Add a version only after
# reading its transact_write_items and running those tests.
SUPPORTED_MOTO = ("5.2.1",)

# Every line this launcher prints starts with this, so that the Go side can
# tell it from moto's own output.
PREFIX = "lambdakit-moto:"

# The start of the line that announces plain moto; the Go side echoes that
# line to its own standard error.
FALLBACK = PREFIX + " running plain moto"

# The start of the line that names the moto found (VERSION then the
# version), printed after the line above or the one announcing the patch;
# the Go side reads it to warn about an unsupported version.
VERSION = PREFIX + " moto version"


class Unsupported(Exception):
    """Why the patch cannot be applied to the moto at hand."""


class _WholeTables(Exception):
    """A transaction that needs moto's whole-table copy for its rollback."""


def _say(line):
    print(line, file=sys.stderr, flush=True)


class _CopyModule:
    """Stands in for the copy module inside moto.dynamodb.models.

    Outside a patched transaction it is the copy module. Inside one, on that
    thread, a deep copy of a whole Table returns the table itself: moto takes
    that copy only to put it back on failure, and the patched transaction
    restores the items it wrote instead.
    """

    def __init__(self, real, table_type, state):
        self._real = real
        self._table_type = table_type
        self._state = state

    def __getattr__(self, name):
        return getattr(self._real, name)

    def deepcopy(self, x, memo=None):
        if getattr(self._state, "active", False) and isinstance(x, self._table_type):
            return x
        return self._real.deepcopy(x, memo)


class _Snapshot:
    """The items a transaction may write, as they were before it ran."""

    def __init__(self):
        # (id of table, hash key, range key) -> (table, hash, range, item copy
        # or None when absent, whether a range table already had the hash key)
        self._entries = {}
        # id of a stream shard -> (shard, how many records it had): a failed
        # transaction must not leave stream records behind.
        self._streams = {}

    @classmethod
    def take(cls, backend, dynamo_type, transact_items):
        snap = cls()
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                # moto refuses it before writing this entry; the ones before
                # it are covered, and nothing after it runs.
                continue
            ((op_type, op),) = entry.items()
            if op_type == "ConditionCheck":
                continue  # reads only
            if op_type not in ("Put", "Update", "Delete") or not isinstance(op, dict):
                continue  # moto fails this entry without writing it
            try:
                table = backend.get_table(op["TableName"])
            except Exception:
                raise _WholeTables()
            shard = table.stream_shard
            if shard is not None:
                if not isinstance(getattr(shard, "items", None), list):
                    raise _WholeTables()
                snap._streams.setdefault(id(shard), (shard, len(shard.items)))
            attrs = op.get("Item") if op_type == "Put" else op.get("Key")
            snap._add(table, dynamo_type, attrs)
        return snap

    def _add(self, table, dynamo_type, attrs):
        if not isinstance(attrs, dict) or table.hash_key_attr not in attrs:
            raise _WholeTables()
        hash_key = dynamo_type(attrs[table.hash_key_attr])
        range_key = None
        if table.range_key_attr is not None:
            if table.range_key_attr not in attrs:
                raise _WholeTables()
            range_key = dynamo_type(attrs[table.range_key_attr])
        ident = (id(table), hash_key, range_key)
        if ident in self._entries:
            return  # moto refuses the second write of an item anyway
        if range_key is None:
            current = table.items.get(hash_key)
            had_hash = current is not None
        else:
            # .get: table.items is a defaultdict, and a lookup must not
            # create an empty bucket.
            bucket = table.items.get(hash_key)
            had_hash = bucket is not None
            current = bucket.get(range_key) if bucket is not None else None
        # Update changes the stored item in place, so keep a copy.
        saved = copy.deepcopy(current) if current is not None else None
        self._entries[ident] = (table, hash_key, range_key, saved, had_hash)

    def restore(self):
        for shard, n in self._streams.values():
            del shard.items[n:]
        for table, hash_key, range_key, saved, had_hash in self._entries.values():
            if range_key is None:
                if saved is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = saved
                continue
            if saved is not None:
                table.items[hash_key][range_key] = saved
                continue
            bucket = table.items.get(hash_key)
            if bucket is None:
                continue
            bucket.pop(range_key, None)
            if not bucket and not had_hash:
                del table.items[hash_key]


def patch(moto):
    """Patches moto's TransactWriteItems rollback in place.

    Raises Unsupported, having changed nothing, when moto is not a version
    this was written for or the code to patch is not where it should be.
    """
    version = getattr(moto, "__version__", "unknown")
    if version not in SUPPORTED_MOTO:
        raise Unsupported(
            "moto %s: this launcher was written for moto %s" % (version, ", ".join(SUPPORTED_MOTO))
        )
    try:
        from moto.dynamodb import models
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.models.table import Table
    except ImportError as e:
        raise Unsupported("moto %s: %s" % (version, e))
    backend = getattr(models, "DynamoDBBackend", None)
    original = getattr(backend, "transact_write_items", None) if backend else None
    code = getattr(original, "__code__", None)
    # The rollback this replaces: copy.deepcopy of each table, put back into
    # self.tables on failure.
    if code is None or not {"copy", "deepcopy", "tables"} <= set(code.co_names):
        raise Unsupported("moto %s: DynamoDBBackend.transact_write_items is not the one this launcher patches" % version)
    if getattr(models, "copy", None) is not copy:
        raise Unsupported("moto %s: moto.dynamodb.models does not use the copy module as expected" % version)
    if not callable(getattr(backend, "get_table", None)):
        raise Unsupported("moto %s: DynamoDBBackend.get_table is missing" % version)

    state = threading.local()

    def transact_write_items(self, transact_items):
        try:
            snap = _Snapshot.take(self, DynamoType, transact_items)
        except _WholeTables:
            return original(self, transact_items)
        state.active = True
        try:
            return original(self, transact_items)
        except BaseException:
            # moto rolls back by putting the "copies" (the tables themselves)
            # back; the items it wrote are undone here.
            snap.restore()
            raise
        finally:
            state.active = False

    transact_write_items.__wrapped__ = original
    transact_write_items.__doc__ = original.__doc__
    models.copy = _CopyModule(copy, Table, state)
    backend.transact_write_items = transact_write_items
    _serialize_dynamodb()
    _no_builtin_mappings()
    _kinesis_split_keeps_records()
    one_instant = _sqs_one_instant()
    _fifo_receive_in_order(one_instant)
    _sqs_counts_at_one_instant(one_instant)


def _no_builtin_mappings():
    """Keeps moto's own event source mappings from touching the data.

    moto runs a mapping's function through Docker, which the local stack
    has none of, and 'delivers' all the same: on an SQS queue it receives
    each message as it is sent (raising its ApproximateReceiveCount toward
    the redrive policy) and gives it back; on a DynamoDB stream it drops
    the records it could not deliver, whatever the mapping's state, so the
    stream reads empty. lambdakit run plays the mappings instead; here moto
    keeps them as configuration only, as the control plane it stands for.
    """
    try:
        from moto.dynamodb.models.table import StreamShard
        from moto.sqs.models import Queue
    except ImportError:
        return
    lock = threading.Lock()

    def without_mappings(owner_of, original):
        def call(self, *args, **kwargs):
            owner = owner_of(self)
            with lock:
                mappings = owner.lambda_event_source_mappings
                owner.lambda_event_source_mappings = {}
                try:
                    return original(self, *args, **kwargs)
                finally:
                    owner.lambda_event_source_mappings = mappings

        call.__wrapped__ = original
        return call

    if hasattr(StreamShard, "add"):
        StreamShard.add = without_mappings(lambda shard: shard.table, StreamShard.add)
    if hasattr(Queue, "add_message"):
        Queue.add_message = without_mappings(lambda queue: queue, Queue.add_message)


def _kinesis_split_keeps_records():
    """Leaves a split Kinesis shard's records in the shard, and writes none to it.

    Kinesis keeps a parent shard's records after a split until they age
    out, and a consumer reads the parent to its end before its children.
    moto 5.2.1 moves the parent's records into the children instead, as if
    they were written again, so a consumer that read them from the parent
    gets them a second time. The split runs with the parent's records set
    aside, then put back, so the parent closes holding them.
    """
    try:
        from moto.kinesis.models import Stream
    except ImportError:
        return
    original = getattr(Stream, "split_shard", None)
    if original is None:
        return

    def split_shard(self, shard_to_split, new_starting_hash_key):
        shard = self.shards.get(shard_to_split)
        if shard is None:
            return original(self, shard_to_split, new_starting_hash_key)
        records, shard.records = shard.records, type(shard.records)()
        try:
            return original(self, shard_to_split, new_starting_hash_key)
        finally:
            shard.records = records

    split_shard.__wrapped__ = original
    Stream.split_shard = split_shard

    # moto also routes a record to the first shard whose hash key range
    # holds its key, closed or not, so that after a split new records go on
    # landing in the parent. Kinesis writes to open shards only.
    route = getattr(Stream, "get_shard_for_key", None)
    if route is None:
        return

    def get_shard_for_key(self, partition_key, explicit_hash_key):
        shard = route(self, partition_key, explicit_hash_key)  # validates the key
        if shard is None or shard.is_open:
            return shard
        if explicit_hash_key:
            key = int(explicit_hash_key)
        else:
            key = int(hashlib.md5(partition_key.encode("utf-8")).hexdigest(), 16)
        for candidate in self.shards.values():
            if candidate.is_open and candidate.starting_hash <= key <= candidate.ending_hash:
                return candidate
        return shard

    get_shard_for_key.__wrapped__ = route
    Stream.get_shard_for_key = get_shard_for_key


def _fifo_receive_in_order(one_instant):
    """Makes a FIFO queue's receives keep each message group whole and in order.

    SQS never hands a group's message out while an earlier one of the group
    is in flight, and hands the oldest out first. moto 5.2.1 takes the
    groups in flight once, before it scans the queue, so two receives that
    run at once can each take a message of one group; and it leaves a
    message whose visibility timeout ran out among those in flight until
    its scan reaches it, so that of two such messages of a group the later
    can come out first while the earlier is skipped. Here a FIFO queue's
    receives run one at a time, each after the messages visible again are
    taken off the in-flight set. The clock stands still during each of
    those receives: moto asks it anew for every message it looks at, and a
    message that turned visible after that first step was taken off the
    in-flight set midway through the scan, which freed its group after the
    group's older message had been passed over as blocked, so the later one
    came out alone. A long poll is played by short receives with pauses
    between them, so that one waiting receive holds up no other.

    SQS numbers a FIFO queue's messages in the order they are sent (the
    SequenceNumber grows), which is how a consumer tells a group's oldest
    message; moto draws 20 random digits, or none with content-based
    deduplication. Here each message sent to a FIFO queue gets the next
    number of a counter instead, under the receives' lock, so that no
    receive sees a message before its number.
    """
    try:
        from moto.sqs.models import SQSBackend
    except ImportError:
        return
    original = getattr(SQSBackend, "receive_message", None)
    if original is None:
        return
    one_instant = one_instant or contextlib.nullcontext
    lock = threading.Lock()

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        queue = self.get_queue(queue_name)
        if not getattr(queue, "fifo_queue", False):
            return original(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names)
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        while True:
            with lock, one_instant():
                for message in [m for m in queue.pending_messages if m.visible]:
                    queue.pending_messages.discard(message)
                result = original(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            if result or time.monotonic() >= deadline:
                return result
            time.sleep(0.05)

    receive_message.__wrapped__ = original
    SQSBackend.receive_message = receive_message

    send = getattr(SQSBackend, "send_message", None)
    if send is None:
        return
    counter = [0]

    def send_message(self, queue_name, *args, **kwargs):
        if not getattr(self.get_queue(queue_name), "fifo_queue", False):
            return send(self, queue_name, *args, **kwargs)
        with lock:
            message = send(self, queue_name, *args, **kwargs)
            # A duplicate is the message first sent, numbered then.
            if not getattr(message, "lambdakit_numbered", False):
                counter[0] += 1
                message.sequence_number = "%020d" % counter[0]
                message.lambdakit_numbered = True
            return message

    send_message.__wrapped__ = send
    SQSBackend.send_message = send_message


def _sqs_counts_at_one_instant(one_instant):
    """Reads the clock once for each GetQueueAttributes.

    moto works out ApproximateNumberOfMessages, ...NotVisible and
    ...Delayed one after the other (and, for named attributes, each more
    than once), every time asking the clock whether a message is visible
    yet. A message whose visibility timeout ends in between is counted in
    none of them, so a queue holding messages can read as empty; in SQS a
    message is always visible, in flight or delayed. Here the counts of one
    request all use the time it began.
    """
    try:
        from moto.sqs.models import SQSBackend
    except ImportError:
        return
    original = getattr(SQSBackend, "get_queue_attributes", None)
    if one_instant is None or original is None:
        return

    def get_queue_attributes(self, *args, **kwargs):
        with one_instant():
            return original(self, *args, **kwargs)

    get_queue_attributes.__wrapped__ = original
    SQSBackend.get_queue_attributes = get_queue_attributes


def _sqs_one_instant():
    """Replaces moto's SQS clock with one that can stand still.

    Returns a context manager: inside it, on its thread, moto.sqs.models's
    unix_time_millis (which tells whether a message is visible or delayed,
    and when a message received turns visible) answers the time the
    outermost such block began, so that one request sees each message in one
    state throughout. Returns None when that module has no such clock.
    """
    try:
        from moto.sqs import models
    except ImportError:
        return None
    real_now = getattr(models, "unix_time_millis", None)
    if real_now is None:
        return None
    frozen = threading.local()

    def unix_time_millis(*args, **kwargs):
        at = getattr(frozen, "at", None)
        if at is None or args or kwargs:
            return real_now(*args, **kwargs)
        return at

    @contextlib.contextmanager
    def one_instant():
        if getattr(frozen, "at", None) is not None:
            yield  # inside another request's instant (a receive reads attributes)
            return
        frozen.at = real_now()
        try:
            yield
        finally:
            frozen.at = None

    models.unix_time_millis = unix_time_millis
    return one_instant


def _serialize_dynamodb():
    """Serves DynamoDB requests one at a time.

    moto's server runs each request on a thread of its own, and its DynamoDB
    backend has no lock: a conditional write checks its condition and then
    writes, so two racing conditional writes on one key can both succeed,
    which DynamoDB never allows. One lock around each DynamoDB action makes
    every request atomic, as a conditional write must be. moto does its work
    under Python's global interpreter lock anyway, so little is lost.
    """
    try:
        from moto.dynamodb.responses import DynamoHandler
    except ImportError:
        return
    original = getattr(DynamoHandler, "call_action", None)
    if original is None:
        return
    lock = threading.Lock()

    def call_action(self):
        with lock:
            return original(self)

    call_action.__wrapped__ = original
    DynamoHandler.call_action = call_action


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        import moto
    except ImportError as e:
        _say(
            "%s (moto_server from PATH): %s cannot import moto (%s), so transactions copy whole tables"
            % (FALLBACK, sys.executable, e)
        )
        os.execvp("moto_server", ["moto_server"] + list(argv))
    if os.environ.get("LAMBDAKIT_MOTO_PATCH", "1") == "0":
        _say("%s %s: LAMBDAKIT_MOTO_PATCH=0, so transactions copy whole tables" % (FALLBACK, moto.__version__))
    else:
        try:
            patch(moto)
        except Unsupported as e:
            _say("%s: %s; transactions copy whole tables and slow down as they grow" % (FALLBACK, e))
        else:
            _say("%s moto %s patched: transactions snapshot only the items they write, DynamoDB requests run one at a time, and moto's own event source mappings leave queues and streams alone; a split Kinesis shard keeps its records; FIFO receives see a group in flight, at one instant; a queue's counts are read at one instant" % (PREFIX, moto.__version__))
    _say("%s %s" % (VERSION, getattr(moto, "__version__", "unknown")))
    from moto.server import main as serve

    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
