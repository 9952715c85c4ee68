#!/bin/sh
# qlab boot, part 2 (started once, beside dropbear): radios, access points, then the firmware.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# the traffic variant (lan/wan NICs present): route lan -> wan through the nftables rule set
lw-route boot > /tmp/log/route.log 2>&1 || echo "qlab: lw-route boot failed (see /tmp/log/route.log)" > /dev/console
wifi up > /tmp/log/wifi.log 2>&1 || echo "qlab: wifi up failed (see /tmp/log/wifi.log)" > /dev/console
if [ -x /usr/sbin/stad ]; then
  service stad start
  service stamon start
fi
echo "qlab: boot.d done" > /dev/console
