<?php
// php-memcached's Memcached::getAllKeys() (libmemcached's memcached_dump: `stats cachedump`)
// against HOST:PORT; prints one key per line. Used by run.sh.
[$host, $port] = explode(':', $argv[1]);
$m = new Memcached();
$m->addServer($host, (int)$port);
$keys = $m->getAllKeys();
if ($keys === false) {
    fwrite(STDERR, "getAllKeys failed: " . $m->getResultMessage() . "\n");
    exit(1);
}
foreach ($keys as $k) {
    echo $k, "\n";
}
