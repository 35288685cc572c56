// Keys: the KV namespace as a tree by '/', live from a watch; a key's value with its revisions;
// edit and create with compare-and-set (the form carries the revision it read, so a conflicting
// write is shown and never overwritten), and delete. The tree lists the keys under a prefix the
// operator picks (all by default): a token whose role reads only key:cfg/ is refused the whole
// namespace, but may list cfg/, and open any key it may read by name.
import { api, explain, listAll, namePath, watch } from './api.js';
import { h, formatNumber, notice, confirmDialog } from './dom.js';

export function keysPage(main, selectedKey) {
  const keys = new Map();  // key -> {value, encoding, mod_revision, ...}
  const treeArea = h('nav', { class: 'panel tree', id: 'key-tree', 'aria-label': 'Keys' }, notice('empty', 'Reading the keys…'));
  const editor = h('section', { class: 'panel', id: 'key-editor', 'aria-live': 'polite' });
  const streamNote = h('p', { class: 'subtitle' }, 'Connecting to the watch stream…');
  let prefix = sessionStorage.getItem('key-prefix') || '';
  const prefixInput = h('input', { type: 'text', id: 'key-prefix', placeholder: 'all keys', autocomplete: 'off', value: prefix });
  const openByName = () => { location.hash = '#/keys/' + encodeURIComponent(prefixInput.value); };
  main.append(h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', {}, 'Keys'), streamNote),
    h('form', { class: 'filter', onsubmit: (e) => {
      e.preventDefault();
      prefix = prefixInput.value;
      sessionStorage.setItem('key-prefix', prefix);
      load();
    } },
    h('label', { for: 'key-prefix' }, 'Prefix or key'), prefixInput,
    h('button', { type: 'submit' }, 'List'),
    h('button', { type: 'button', class: 'secondary', onclick: openByName }, 'Open key')),
    h('button', { onclick: () => { location.hash = '#/keys'; } }, 'New key')),
  h('div', { class: 'split' }, treeArea, editor));

  let stopped = false;
  let handle = null;
  let renderTimer = null;
  let form = null;  // the open editor: {key, readRevision, session, dirty, textarea, message}
  let loads = 0;  // a listing that a later one (another prefix) overtook is dropped
  let listed = false;  // the tree holds every key under the prefix

  async function load() {
    const mine = ++loads;
    listed = false;
    if (handle) handle.close();
    handle = null;
    treeArea.replaceChildren(notice('empty', 'Reading the keys…'));
    try {
      const { items, revision } = await listAll('/v1/kv/' + namePath(prefix), 'kvs', { prefix: 'true' });
      if (stopped || mine !== loads) return;
      keys.clear();
      for (const kv of items) keys.set(kv.key, kv);
      listed = true;
      renderTree();
      handle = watch(prefix, { prefix: true, startRevision: revision + 1 }, onEvent, onStreamState);
    } catch (error) {
      if (stopped || mine !== loads) return;
      keys.clear();
      treeArea.replaceChildren(notice('error', error.code === 'permission_denied'
        ? `Cannot list ${prefix ? `the keys under “${prefix}”` : 'all keys'}: ${explain(error)}. List a prefix you may read, or open a key by name.`
        : explain(error)));
      streamNote.textContent = 'Not watching: nothing is listed.';
    }
    showEditor();
  }

  function onStreamState({ state, error }) {
    if (state === 'live') streamNote.textContent = 'Live: changes appear as they commit.';
    else if (state === 'reconnecting') streamNote.textContent = 'The watch stream broke off; reconnecting…';
    else if (state === 'refused') streamNote.textContent = `Not live: the watch stream was refused: ${explain(error)}.`;
    else if (state === 'compacted') {
      streamNote.textContent = 'Fell behind the kept history; reading everything again…';
      load();
    }
  }

  function onEvent(event) {
    const old = keys.get(event.key);
    if (old && old.mod_revision >= event.revision) return;  // our own save, already applied
    if (event.type === 'put') {
      keys.set(event.key, {
        key: event.key, value: event.value, encoding: event.encoding, mod_revision: event.revision,
        create_revision: old ? old.create_revision : event.revision, version: old ? old.version + 1 : 1,
        session: event.session || undefined,
      });
    } else if (event.type === 'delete') {
      keys.delete(event.key);
    }
    if (form && form.key === event.key) keyChangedUnderEditor(event);
    clearTimeout(renderTimer);
    renderTimer = setTimeout(renderTree, 100);
  }

  function keyChangedUnderEditor(event) {
    if (event.revision <= form.readRevision) return;
    if (form.dirty) {
      form.message.replaceChildren(notice('warn', event.type === 'delete'
        ? `Deleted on the server at revision ${event.revision} since you read it: saving will be refused.`
        : `Changed on the server at revision ${event.revision} since you read it (you read ${form.readRevision}): saving will be refused; reload to see it.`));
    } else {
      showEditor();
    }
  }

  // The keys as nested folders by '/': {children: Map(name -> node), key?: full key}.
  function renderTree() {
    if (!keys.size) return treeArea.replaceChildren(notice('empty', prefix ? `No key starts with “${prefix}”.` : 'No keys yet. Create one with “New key”.'));
    const root = { children: new Map() };
    for (const key of [...keys.keys()].sort()) {
      const parts = key.split('/');
      let node = root;
      parts.forEach((part, i) => {
        // A key ending in '/' ("dir/") would be an empty button inside its folder: it is labelled
        // with its whole name.
        const label = i < parts.length - 1 ? part + '/' : part || key;
        if (!node.children.has(label)) node.children.set(label, { children: new Map() });
        node = node.children.get(label);
        if (i === parts.length - 1) node.key = key;
      });
    }
    const draw = (node) => h('ul', { role: 'group' }, [...node.children].map(([label, child]) => h('li', {},
      child.key !== undefined
        ? h('button', { 'data-key': child.key, 'aria-current': child.key === selectedKey ? 'true' : null,
            onclick: () => { location.hash = '#/keys/' + encodeURIComponent(child.key); } }, label)
        : null,
      child.key === undefined ? h('div', { class: 'folder' }, label) : null,
      child.children.size ? draw(child) : null)));
    treeArea.replaceChildren(h('p', { class: 'subtitle' }, `${formatNumber(keys.size)} keys`), draw(root));
  }

  // A key outside the prefix listed (or when listing was refused) is read on its own.
  async function showEditor() {
    if (!selectedKey) return showCreate();
    const known = keys.get(selectedKey);
    if (known) return showForm(known);
    form = null;
    if (listed && selectedKey.startsWith(prefix))
      return editor.replaceChildren(notice('empty', `There is no key “${selectedKey}” (any more).`));
    try {
      const kv = await api('GET', '/v1/kv/' + namePath(selectedKey));
      if (!stopped && !form) showForm(kv);
    } catch (error) {
      if (stopped || form) return;
      editor.replaceChildren(notice(error.status === 404 ? 'empty' : 'error', error.status === 404
        ? `There is no key “${selectedKey}” (any more).` : `Cannot read “${selectedKey}”: ${explain(error)}.`));
    }
  }

  function showForm(kv) {
    const textarea = h('textarea', { id: 'key-value', 'aria-describedby': 'key-meta' }, kv.value);
    const message = h('div', { 'aria-live': 'assertive' });
    form = { key: kv.key, readRevision: kv.mod_revision, session: kv.session, encoding: kv.encoding, dirty: false, textarea, message };
    textarea.addEventListener('input', () => { form.dirty = true; });
    editor.replaceChildren(
      h('h2', { class: 'mono', style: 'margin-top:0' }, kv.key),
      h('div', { class: 'meta', id: 'key-meta' },
        h('span', {}, 'Modified at revision ', h('b', { id: 'key-mod-revision' }, kv.mod_revision)),
        h('span', {}, 'Created at ', h('b', {}, kv.create_revision)),
        h('span', {}, 'Version ', h('b', {}, kv.version)),
        kv.session ? h('span', {}, 'Ephemeral, owned by ', h('a', { href: '#/sessions/' + kv.session }, `session ${kv.session}`)) : null,
        kv.encoding === 'base64' ? h('span', {}, h('b', {}, 'binary'), ': shown as base64') : null),
      h('form', { onsubmit: (e) => { e.preventDefault(); save(); } },
        h('label', { for: 'key-value' }, 'Value'), textarea, message,
        h('div', { class: 'actions' },
          h('button', { type: 'button', class: 'danger', onclick: remove }, 'Delete'),
          h('button', { type: 'button', class: 'secondary', onclick: () => { form = null; showEditor(); } }, 'Reload'),
          h('button', { type: 'submit' }, `Save (if still at revision ${kv.mod_revision})`))));
  }

  function showCreate() {
    const name = h('input', { type: 'text', id: 'new-key', required: true, placeholder: 'config/service/setting', autocomplete: 'off' });
    const value = h('textarea', { id: 'new-value' });
    const message = h('div', { 'aria-live': 'assertive' });
    form = null;
    editor.replaceChildren(h('h2', { style: 'margin-top:0' }, 'New key'),
      h('p', { class: 'subtitle' }, 'Created only if no key has this name yet (compare-and-set with revision 0). Pick a key in the tree to edit it.'),
      h('form', { onsubmit: async (e) => {
        e.preventDefault();
        try {
          await api('PUT', '/v1/kv/' + namePath(name.value), { value: value.value, prev_revision: 0 });
          location.hash = '#/keys/' + encodeURIComponent(name.value);
        } catch (error) {
          message.replaceChildren(notice('error', error.code === 'cas_mismatch'
            ? `“${name.value}” exists already (at revision ${error.details.mod_revision}): nothing was changed. Open it from the tree to edit it.`
            : explain(error)));
        }
      } },
      h('label', { for: 'new-key' }, 'Key'), name, h('label', { for: 'new-value' }, 'Value'), value, message,
      h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create'))));
  }

  async function save() {
    const { key, readRevision, session, textarea, message, encoding } = form;
    const body = { value: textarea.value, prev_revision: readRevision };
    if (encoding === 'base64') body.encoding = 'base64';
    // A put without `session` makes the key persistent (docs/lock-service.md): an ephemeral key
    // stays its session's.
    if (session) body.session = session;
    try {
      const result = await api('PUT', '/v1/kv/' + namePath(key), body);
      const old = keys.get(key);
      const kv = old && old.mod_revision >= result.revision ? old : { key, value: textarea.value, encoding,
        mod_revision: result.revision, create_revision: result.create_revision, version: result.version, session };
      if (key.startsWith(prefix)) keys.set(key, kv);
      showForm(kv);
      form.message.replaceChildren(notice('ok', `Saved at revision ${result.revision}.`));
    } catch (error) {
      if (error.code === 'cas_mismatch') {
        const now = error.details.mod_revision;
        message.replaceChildren(notice('error', now
          ? `Conflict: “${key}” was changed by someone else (now at revision ${now}; you read ${readRevision}). Your edit was NOT saved and theirs was kept. Copy your text if you need it, then Reload.`
          : `Conflict: “${key}” was deleted since you read it at revision ${readRevision}. Your edit was NOT saved.`));
        message.firstChild.id = 'cas-conflict';
      } else {
        message.replaceChildren(notice('error', `Not saved: ${explain(error)}`));
      }
    }
  }

  async function remove() {
    const { key, readRevision, message } = form;
    if (!await confirmDialog(`Delete “${key}”?`, `The key is deleted only if it is still at revision ${readRevision}.`, 'Delete key')) return;
    try {
      await api('DELETE', `/v1/kv/${namePath(key)}?prev_revision=${readRevision}`);
      location.hash = '#/keys';
    } catch (error) {
      message.replaceChildren(notice('error', error.code === 'cas_mismatch'
        ? `Not deleted: “${key}” changed since you read it (now at revision ${error.details.mod_revision}).`
        : `Not deleted: ${explain(error)}`));
    }
  }

  load();
  return () => {
    stopped = true;
    clearTimeout(renderTimer);
    if (handle) handle.close();
  };
}
