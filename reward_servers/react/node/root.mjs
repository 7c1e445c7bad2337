// Where the React server's Node dependencies are, for every module of the worker: ROOT, the folder with package.json
// and node_modules, which the server passes (reward_servers/react/node_deps.py: an installed package keeps it outside
// site-packages; run by hand in a clone, the package folder), and a require() that resolves there.
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(process.env.REACT_REWARD_NODE_DIR || path.join(HERE, '..'));
export const require = createRequire(path.join(ROOT, 'package.json'));
