<?php
// php-amqplib over TLS against Charon, driven by tests/python/test_tls_clients.py.
// Usage: php php_amqplib_tls.php PORT CAFILE CERT|- KEY|- plain|external QUEUE BODY
// Connects to 127.0.0.1:PORT (server certificate verified against CAFILE, client certificate
// when given), logs in as guest/guest (plain) or with the certificate (EXTERNAL), publishes BODY
// to QUEUE with publisher confirms, consumes it back and acks it. Prints one JSON line:
// {"ok": true, "body": ...} or {"ok": false, "error": CLASS, "message": ...} (exit 1; the
// message includes PHP's warnings and OpenSSL's error queue, where TLS failures are told).
require_once '/usr/share/php/PhpAmqpLib/autoload.php';

use PhpAmqpLib\Connection\AMQPSSLConnection;
use PhpAmqpLib\Message\AMQPMessage;

[$_, $port, $cafile, $cert, $key, $login, $queue, $body] = $argv;
$ssl = [
    'cafile' => $cafile,
    'verify_peer' => true,
    'verify_peer_name' => true,
    'peer_name' => '127.0.0.1',
];
if ($cert !== '-') {
    $ssl['local_cert'] = $cert;
    $ssl['local_pk'] = $key;
}
$external = $login === 'external';
// PHP reports TLS failures (e.g. "certificate verify failed") as warnings: keep them.
$warnings = [];
set_error_handler(function ($no, $msg) use (&$warnings) {
    $warnings[] = $msg;
    return true;
});
try {
    $conn = new AMQPSSLConnection(
        '127.0.0.1', (int)$port,
        $external ? '' : 'guest', $external ? '' : 'guest', '/',
        $ssl,
        ['login_method' => $external ? 'EXTERNAL' : 'AMQPLAIN', 'connection_timeout' => 30, 'read_write_timeout' => 60]
    );
    $ch = $conn->channel();
    $ch->queue_declare($queue, false, false, false, true);
    $ch->confirm_select();
    $ch->basic_publish(new AMQPMessage($body), '', $queue);
    $ch->wait_for_pending_acks(30);
    $got = null;
    $ch->basic_consume($queue, '', false, false, false, false, function ($m) use (&$got) {
        $got = $m->getBody();
        $m->ack();
    });
    while ($got === null) {
        $ch->wait(null, false, 30);
    }
    $ch->close();
    $conn->close();
    echo json_encode(['ok' => true, 'body' => $got]), "\n";
} catch (\Throwable $e) {
    if ($e instanceof \PhpAmqpLib\Exception\AMQPIOException) {
        // php-amqplib keeps only PHP's last warning ("Unable to connect"); the TLS reason is
        // in the one before it: connect once more with the same TLS options to read it.
        $ctx = stream_context_create(['ssl' => $ssl]);
        $s = stream_socket_client("ssl://127.0.0.1:$port", $no, $str, 30, STREAM_CLIENT_CONNECT, $ctx);
        if ($s !== false) {
            fclose($s);
        }
    }
    $message = implode(' | ', array_merge($warnings, [$e->getMessage()]));
    echo json_encode(['ok' => false, 'error' => get_class($e), 'message' => $message]), "\n";
    exit(1);
}
