// nodeecho.js: a Node.js echo server for t_app_node. node nodeecho.js PORT [WORKERS]
// WORKERS > 0: the cluster module (its primary accepts and hands each
// connection to a worker over IPC, SCM_RIGHTS); else one process.
const cluster = require('cluster');
const net = require('net');
const port = +process.argv[2], workers = +(process.argv[3] || 0);
if (workers > 0 && cluster.isPrimary) {
	cluster.schedulingPolicy = cluster.SCHED_RR;
	let up = 0;
	for (let i = 0; i < workers; i++)
		cluster.fork().on('listening', () => { if (++up === workers) console.log('listening', process.pid); });
} else {
	net.createServer(c => {
		c.on('data', d => c.write(d));
		c.on('end', () => c.end());
		c.on('error', e => console.log('error', e.code));
	}).listen(port, () => { if (!workers) console.log('listening', process.pid); });
}
