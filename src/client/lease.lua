-- tvmq: leases of queue t on a Redis or a Redis Cluster (docs/client.md,
-- "Leases on Redis"). One script for every lease call, loaded once per
-- server and called by its SHA-1 (EVALSHA; EVAL after NOSCRIPT).
--
-- KEYS (all in the hash slot of "t": "{t}:..." hashes on "t"):
--   1 t            LIST  the records, as pushed (RPUSH t value)
--   2 {t}:stage    LIST  records a blocked consumer moved out of t (BLMOVE), taken before t
--   3 {t}:retry    LIST  ids to deliver again (released, or their lease ran out), taken first
--   4 {t}:leased   ZSET  "<id>-<tag>" of each lease, scored by its deadline (ms, server clock)
--   5 {t}:rec      HASH  "<id>" -> the record, "<id>:n" -> its deliveries so far, while it
--                        is leased or waits to be delivered again
--   6 {t}:delayed  ZSET  ids released with a delay, scored by when they are due (ms)
--   7 {t}:opts     HASH  lease_ms, max_deliveries, dead_letter, max_leases
--   8 {t}:stats    HASH  acked, released, expired, redelivered, dead-lettered, dropped
--   9 {t}:seq      STRING the last id or tag given (INCRBY)
--  10 the dead-letter list: "d" (the queue named by dead_letter), or "{t}:dead"
--     when "d" is in another slot of a cluster (the client then moves it on)
-- ARGV: 1 op (LEASE ACK RELEASE REJECT EXTEND, ACKLEASE: ACK then LEASE), 2
-- the dead_letter the client believes ("" none), 3 "1" when KEYS[10] is
-- "{t}:dead" (its length is returned), 4 LEASE: ms (0: lease_ms); other
-- ops: "<id>-<tag>", 5 RELEASE: delay ms, EXTEND and ACKLEASE: ms.
-- Replies: {"OK", outbox, ...}, {"EMPTY", outbox, ms to the next deadline or
-- -1}, {"DL", dead_letter} (the client's is stale: nothing done), or an
-- error whose first word is the tvm code.
local ready, stage, retry, leased, rec, delayed, opts, stats, seq, dead =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local op = ARGV[1]
local o = redis.call('HMGET', opts, 'lease_ms', 'max_deliveries', 'dead_letter', 'max_leases')
if not o[1] then
    return redis.error_reply('NOT_SUPPT_OPT queue ' .. ready .. ' has no leases here (no hash ' .. opts ..
        '): set its lease options with lTvmCreateQueueEx')
end
local dl = o[3] or ''
if dl ~= ARGV[2] then
    return {'DL', dl}
end
local max_dlv = tonumber(o[2]) or 0
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function outbox()
    if ARGV[3] == '1' then
        return tostring(redis.call('LLEN', dead))
    end
    return '0'
end

-- The record of id leaves for the dead-letter list (or is dropped).
local function bury(id)
    local v = redis.call('HGET', rec, id)
    redis.call('HDEL', rec, id, id .. ':n')
    if v and dl ~= '' then
        redis.call('RPUSH', dead, v)
        redis.call('HINCRBY', stats, 'dead-lettered', 1)
    else
        redis.call('HINCRBY', stats, 'dropped', 1)
    end
end

-- The record of id is to be delivered again (after delay ms), or buried
-- at the delivery limit.
local function again(id, delay)
    if max_dlv > 0 and (tonumber(redis.call('HGET', rec, id .. ':n')) or 0) >= max_dlv then
        bury(id)
    elseif delay > 0 then
        redis.call('ZADD', delayed, now + delay, id)
    else
        redis.call('RPUSH', retry, id)
    end
end

-- No daemon: every call takes back what is due (at most 100 of each).
for _, id in ipairs(redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', delayed, id)
    redis.call('RPUSH', retry, id)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', leased, '-inf', '(' .. now, 'LIMIT', 0, 100)) do
    redis.call('ZREM', leased, m)
    redis.call('HINCRBY', stats, 'expired', 1)
    again(string.match(m, '^(%d+)-'), 0)
end

local function lease_time(ms)
    ms = tonumber(ms) or 0
    if ms <= 0 then
        ms = tonumber(o[1]) or 30000
    end
    return ms
end

local function lease(ms)
    local max_leases = tonumber(o[4]) or 0
    if max_leases > 0 and redis.call('ZCARD', leased) >= max_leases then
        return redis.error_reply('LEASE_LIMIT queue ' .. ready .. ' has ' .. max_leases .. ' leases in flight, its maximum')
    end
    -- Records to deliver again first, then those a blocked consumer
    -- staged, then the list's: one LMPOP for the three.
    local id, v, n, tag
    while true do
        local got = redis.call('LMPOP', 3, retry, stage, ready, 'LEFT')
        if not got then
            local hint = -1
            local a = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
            local b = redis.call('ZRANGE', leased, 0, 0, 'WITHSCORES')
            if a[2] then hint = tonumber(a[2]) - now end
            if b[2] then
                local h = tonumber(b[2]) - now + 1
                if hint < 0 or h < hint then hint = h end
            end
            return {'EMPTY', outbox(), tostring(hint)}
        end
        if got[1] == retry then
            id = got[2][1]
            v = redis.call('HGET', rec, id)
            if v then
                n = redis.call('HINCRBY', rec, id .. ':n', 1)
                redis.call('HINCRBY', stats, 'redelivered', 1)
                tag = redis.call('INCR', seq)
                break
            end
        else
            v = got[2][1]
            tag = redis.call('INCRBY', seq, 2)
            id = tostring(tag - 1)
            n = 1
            redis.call('HSET', rec, id, v, id .. ':n', 1)
            break
        end
    end
    local m = id .. '-' .. tag
    redis.call('ZADD', leased, now + lease_time(ms), m)
    return {'OK', outbox(), m, tostring(n), v}
end

if op == 'LEASE' then
    return lease(ARGV[4])
end

local m = ARGV[4]
local id = string.match(m or '', '^(%d+)-%d+$')
if not id then
    return redis.error_reply('LEASE_INVALID malformed lease id')
end
local deadline = redis.call('ZSCORE', leased, m)
if not deadline then
    return redis.error_reply('LEASE_EXPIRED no such lease of queue ' .. ready ..
        ': it ran out, was ended, or the record was delivered again since')
end
redis.call('ZREM', leased, m)
if tonumber(deadline) < now then
    redis.call('HINCRBY', stats, 'expired', 1)
    again(id, 0)
    return redis.error_reply('LEASE_EXPIRED the lease ran out ' .. (now - tonumber(deadline)) .. ' ms ago')
end
if op == 'ACK' or op == 'ACKLEASE' then
    redis.call('HDEL', rec, id, id .. ':n')
    redis.call('HINCRBY', stats, 'acked', 1)
    if op == 'ACKLEASE' then
        return lease(ARGV[5])
    end
    return {'OK', outbox()}
elseif op == 'RELEASE' then
    redis.call('HINCRBY', stats, 'released', 1)
    again(id, tonumber(ARGV[5]) or 0)
    return {'OK', outbox()}
elseif op == 'REJECT' then
    bury(id)
    return {'OK', outbox()}
elseif op == 'EXTEND' then
    local n = id .. '-' .. redis.call('INCR', seq)
    redis.call('ZADD', leased, now + lease_time(ARGV[5]), n)
    return {'OK', outbox(), n}
end
redis.call('ZADD', leased, deadline, m)
return redis.error_reply('ERR unknown lease operation ' .. op)
